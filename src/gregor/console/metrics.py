"""The brokers' own Prometheus metrics, for what Kafka's protocol does not tell a client:
bytes in and out per second, and how many bytes a partition's log holds.

``gregor console --metrics URL`` names one endpoint per broker (``metrics.listener``, or
Kafka's JMX exporter: the names are the same). A thread scrapes them all every
``interval_s``, in parallel and each within ``timeout_s``, and parses them with
prometheus_client's own parser of the text format; pages read what it kept and never
wait on a broker. Rates are counter differences between successive scrapes, summed over
the brokers that answered both; a broker that did not answer is left out of that
interval and named in the pages, and a counter that went down (a restarted broker)
counts from zero, as Prometheus' ``rate`` does.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gregor.metrics import names

log = logging.getLogger(__name__)
# Counters read, by the key of their series in the views.
COUNTERS = {names.BYTES_IN + "_total": "bytes_in", names.BYTES_OUT + "_total": "bytes_out",
            names.MESSAGES_IN + "_total": "messages_in"}
SIZE_COUNTED = ("Size is the bytes of each partition's largest replica's log (the leader's, "
                "which followers trail) from the brokers' kafka_log_log_size")
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    """One broker's answer: its counters by (series, topic or None for the broker's
    total), and its replicas' log sizes."""

    counters: dict[tuple[str, str | None], float]
    sizes: dict[Partition, float]


@dataclass(frozen=True, slots=True)
class Round:
    t: float  # time.time(), for the charts' time axis
    scrapes: dict[str, BrokerScrape]  # by URL, the brokers that answered
    errors: dict[str, str]  # by URL, why the others did not


def parse(text: str) -> BrokerScrape:
    counters: dict[tuple[str, str | None], float] = {}
    sizes: dict[Partition, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = COUNTERS.get(sample.name)
            if key is not None:
                counters[(key, sample.labels.get("topic"))] = sample.value
            elif sample.name == names.LOG_SIZE:
                sizes[(sample.labels["topic"], int(sample.labels["partition"]))] = sample.value
    return BrokerScrape(counters, sizes)


class BrokerMetrics:
    """The scrapes of the last ``window_s`` seconds, one round every ``interval_s``."""

    def __init__(self, urls: Sequence[str], interval_s: float, window_s: float,
                 timeout_s: float = 5.0) -> None:
        self.urls = list(urls)
        self.interval_s = interval_s
        self.timeout_s = min(timeout_s, interval_s)
        self._rounds: deque[Round] = deque(maxlen=max(2, int(window_s / interval_s) + 1))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(len(self.urls), thread_name_prefix="console-scrape")
        self._thread = threading.Thread(target=self._run, name="console-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.scrape()
            except Exception:  # never let one odd answer end the scraping
                log.exception("scraping the brokers' metrics failed")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def scrape(self) -> None:
        t = time.time()
        answers = list(self._pool.map(self._scrape_one, self.urls))
        with self._lock:
            self._rounds.append(Round(
                t, {url: a for url, a in zip(self.urls, answers, strict=True)
                    if isinstance(a, BrokerScrape)},
                {url: a for url, a in zip(self.urls, answers, strict=True) if isinstance(a, str)}))

    def _scrape_one(self, url: str) -> BrokerScrape | str:
        """The broker's metrics, or why there are none, within ``timeout_s``."""
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as answer:
                return parse(answer.read().decode())
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code} {exc.reason}"
        except urllib.error.URLError as exc:
            # In words: "Connection refused", not "[Errno 111] Connection refused".
            reason = exc.reason
            if isinstance(reason, OSError) and reason.strerror:
                return reason.strerror
            return str(reason)
        except (OSError, ValueError) as exc:  # a timeout, a reset, not the text format
            return str(exc) or type(exc).__name__

    def _snapshot(self) -> list[Round]:
        with self._lock:
            return list(self._rounds)

    # ---------------------------------------------------------------- views
    def status(self) -> dict[str, Any]:
        """How many endpoints answered the latest scrape, and why the others did not."""
        rounds = self._snapshot()
        last = rounds[-1] if rounds else None
        return {"endpoints": len(self.urls), "scraped": last is not None,
                "answering": len(last.scrapes) if last else 0,
                "errors": [{"url": url, "error": error}
                           for url, error in (last.errors.items() if last else ())]}

    def throughput(self, topic: str | None = None) -> dict[str, list[float]]:
        """Bytes in, bytes out and messages in per second between successive scrapes,
        of one topic or of the brokers' totals."""
        rounds = self._snapshot()
        series: dict[str, list[float]] = {"t": [], **{key: [] for key in COUNTERS.values()}}
        for before, after in zip(rounds, rounds[1:], strict=False):
            series["t"].append(after.t)
            for key in COUNTERS.values():
                grown = 0.0
                for url, now in after.scrapes.items():
                    then = before.scrapes.get(url)
                    if then is None:
                        continue
                    value = now.counters.get((key, topic), 0.0)
                    previous = then.counters.get((key, topic), 0.0)
                    grown += value - previous if value >= previous else value
                series[key].append(grown / (after.t - before.t))
        return series

    def sizes(self) -> dict[Partition, float]:
        """Each partition's log size: its largest replica's (the leader's; see SIZE_COUNTED)
        in the latest scrape, of the brokers that answered it."""
        rounds = self._snapshot()
        sizes: dict[Partition, float] = {}
        for scrape in (rounds[-1].scrapes.values() if rounds else ()):
            for tp, size in scrape.sizes.items():
                sizes[tp] = max(size, sizes.get(tp, 0.0))
        return sizes
