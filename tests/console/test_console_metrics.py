"""The console reading the brokers' Prometheus metrics (``--metrics``), against real
brokers serving them (``metrics.listener``): bytes and messages per second equal what
producers sent and consumers read, summed over brokers; topic sizes equal what the
segment files hold; an endpoint that refuses or never answers is named as missing and
holds nothing up."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from console_harness import Console
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from gregor.broker.process import BrokerProcess, free_port

TIMEOUT = 30.0
REFRESH_S = 0.5


def _metered(tmp_path_factory: pytest.TempPathFactory, name: str) -> BrokerProcess:
    data = tmp_path_factory.mktemp(name) / "data"
    return BrokerProcess(data, overrides={"metrics.listener": "http://127.0.0.1:0/metrics",
                                          "group.initial.rebalance.delay.ms": "0"}).start()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Two brokers of their own (not one cluster: the console only adds up what their
    endpoints say), so the counters are only this module's traffic."""
    started = [_metered(tmp_path_factory, "metered-a"), _metered(tmp_path_factory, "metered-b")]
    yield started
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def silent() -> Iterator[str]:
    """An endpoint that takes connections and never answers: a hung broker."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"


@pytest.fixture(scope="module")
def refused() -> str:
    """An endpoint where nothing listens: a broker that is down."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="module")
def metered_console(console: Console, brokers: list[BrokerProcess], silent: str,
                    refused: str) -> Iterator[Console]:
    # Depends on ``console`` for the front end it builds.
    urls = [broker.metrics_url for broker in brokers]
    assert None not in urls
    running = Console.start(brokers[0].bootstrap, REFRESH_S,
                            metrics=[*(str(url) for url in urls), silent, refused])
    yield running
    running.stop()


def _wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while not (result := check()):
        assert time.monotonic() < deadline, f"the console did not show {what} in {TIMEOUT} s"
        time.sleep(REFRESH_S / 2)
    return result


def _rounds_seen(console: Console, path: str, key: str) -> float:
    """The time of the console's latest scrape (once it has two) as ``path`` shows it."""
    def latest() -> float | None:
        _, view = console.api("GET", path)
        series = view[key]["bytes"] if key else view["bytes"]
        return series["t"][-1] if series["t"] else None
    return float(_wait_for(latest, "a scrape"))


def _grown(series: dict[str, list[float]], name: str, since: float) -> float:
    """What the rates of the intervals after the scrape at ``since`` add up to."""
    t = series["t"]
    return sum(series[name][i] * (t[i] - t[i - 1]) for i in range(1, len(t)) if t[i - 1] >= since)


def _on_disk(broker: BrokerProcess, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 97})  # many batches of odd sizes
    for i in range(count):
        producer.produce(topic, value=b"v" * (i % 300), key=b"%d" % i, partition=i % partitions)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0


def _consume_all(bootstrap: str, topic: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    received = 0
    deadline = time.monotonic() + TIMEOUT
    while received < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received += 1
    consumer.close()
    assert received == count


def test_rates_are_what_producers_sent_and_consumers_read_summed_over_brokers(
        metered_console: Console, brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    topic_a, topic_b = f"ma-{uuid.uuid4().hex[:8]}", f"mb-{uuid.uuid4().hex[:8]}"
    since = _rounds_seen(metered_console, "/api/cluster", "throughput")
    _produce(a.bootstrap, topic_a, 2000, 3)
    _produce(b.bootstrap, topic_b, 500, 1)
    _consume_all(a.bootstrap, topic_a, 2000)
    bytes_a = sum(_on_disk(a, topic_a, p) for p in range(3))
    bytes_b = _on_disk(b, topic_b, 0)

    def counted() -> dict[str, Any] | None:
        # Until a scrape after the consumer's last fetch: all of it counted.
        _, view = metered_console.api("GET", "/api/cluster")
        series = view["throughput"]["bytes"]
        return series if _grown(series, "bytes_out", since) >= bytes_a else None

    cluster = _wait_for(counted, "the consumer's bytes out")
    # Both brokers' counters, added up: the batches as the producers framed them.
    assert _grown(cluster, "messages_in", since) == pytest.approx(2500)
    assert _grown(cluster, "bytes_in", since) == pytest.approx(bytes_a + bytes_b)
    assert _grown(cluster, "bytes_out", since) == pytest.approx(bytes_a)
    # The topic's own series, on its page.
    _, topic = metered_console.api("GET", f"/api/topics/{topic_a}")
    assert _grown(topic["bytes"], "messages_in", since) == pytest.approx(2000)
    assert _grown(topic["bytes"], "bytes_in", since) == pytest.approx(bytes_a)
    assert _grown(topic["bytes"], "bytes_out", since) == pytest.approx(bytes_a)


def test_topic_sizes_are_what_the_segment_files_hold(
        metered_console: Console, brokers: list[BrokerProcess]) -> None:
    broker = brokers[0]
    name = f"ms-{uuid.uuid4().hex[:8]}"
    _produce(broker.bootstrap, name, 1000, 2)
    expected = [_on_disk(broker, name, p) for p in range(2)]

    def sized() -> dict[str, Any] | None:
        _, view = metered_console.api("GET", f"/api/topics/{name}")
        return view if [p["size"] for p in view["partitions"]] == expected else None

    topic = _wait_for(sized, f"sizes {expected}")
    assert "largest replica" in topic["size_note"]
    _, listed = metered_console.api("GET", "/api/topics")
    assert next(t for t in listed["topics"] if t["name"] == name)["size"] == sum(expected)


def test_endpoints_that_refuse_or_never_answer_are_named_missing(
        metered_console: Console, silent: str, refused: str) -> None:
    _rounds_seen(metered_console, "/api/cluster", "throughput")
    _, cluster = metered_console.api("GET", "/api/cluster")
    status = cluster["throughput"]["metrics"]
    assert (status["endpoints"], status["answering"]) == (4, 2)
    errors = {e["url"]: e["error"] for e in status["errors"]}
    assert "refused" in errors[refused]
    assert "timed out" in errors[silent]
    # Pages read what the scraper kept: they answer while an endpoint hangs.
    _, topics = metered_console.api("GET", "/api/topics")
    assert topics["metrics"]["answering"] == 2


def test_each_brokers_metrics_listener_is_found_without_metrics(
        console: Console, tmp_path: Path) -> None:
    """``scripts/run-cluster.sh`` then ``gregor console``: the console reads each broker's
    ``metrics.listener`` (DescribeConfigs of the broker) and scrapes it with no
    ``--metrics``; a wildcard host is the broker's own address."""
    # Depends on ``console`` for the front end it builds.
    broker = BrokerProcess(tmp_path / "data", overrides={
        "metrics.listener": f"http://0.0.0.0:{free_port()}/metrics"}).start()
    try:
        found = Console.start(broker.bootstrap, REFRESH_S)
        try:
            _rounds_seen(found, "/api/cluster", "throughput")
            _, cluster = found.api("GET", "/api/cluster")
            status = cluster["throughput"]["metrics"]
            assert (status["endpoints"], status["answering"]) == (1, 1), status
        finally:
            found.stop()
    finally:
        broker.stop()


def test_without_metrics_the_pages_say_they_are_not_configured(console: Console) -> None:
    name = f"mn-{uuid.uuid4().hex[:8]}"
    status, answer = console.api("POST", "/api/topics", {"name": name, "partitions": 2})
    assert status == 201, answer
    _, cluster = console.api("GET", "/api/cluster")
    assert cluster["throughput"]["bytes"] is None
    assert "not configured" in cluster["throughput"]["bytes_note"]
    _, topics = console.api("GET", "/api/topics")
    assert "metrics" not in topics and "not configured" in topics["size_note"]
    assert next(t for t in topics["topics"] if t["name"] == name)["size"] is None
    _, topic = console.api("GET", f"/api/topics/{name}")
    assert topic["bytes"] is None and [p["size"] for p in topic["partitions"]] == [None, None]


def test_cluster_page_shows_bytes_in_under_load(browser: Chrome, metered_console: Console,
                                                brokers: list[BrokerProcess]) -> None:
    name = f"ml-{uuid.uuid4().hex[:8]}"
    _produce(brokers[0].bootstrap, name, 1, 1)
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "linger.ms": 5})
        while not stop.is_set():
            producer.produce(name, b"x" * 100)
            producer.poll(0.01)
        producer.flush(TIMEOUT)

    writer = threading.Thread(target=load, name="load")
    writer.start()
    try:
        browser.get(metered_console.page("cluster"))
        WebDriverWait(browser, TIMEOUT).until(lambda b: b.find_elements(
            By.CSS_SELECTOR, "[data-stat=bytes-in] .stat-value") and b.find_element(
            By.CSS_SELECTOR, "[data-stat=bytes-in] .stat-value").text not in ("–", "0 B/s"))
        shown = browser.find_element(By.CSS_SELECTOR, "[data-stat=bytes-in] .stat-value").text
        assert shown.endswith("/s")
        missing = browser.find_element(By.CSS_SELECTOR, "[data-note=metrics-missing]").text
        assert "2 of 4 brokers" in missing
    finally:
        stop.set()
        writer.join()
