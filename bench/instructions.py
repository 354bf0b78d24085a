"""``python -m bench.instructions``: what metrics cost the broker, in instructions counted by
callgrind, per produce request, per fetch and per scrape.

``bench.metrics_bench`` times the broker on a core shared with other work, and a 1-2%
difference drowns in the machine's noise. Instruction counts do not: the same requests
cost the same instructions on a busy machine and a quiet one. Two brokers run in turn
under ``valgrind --tool=callgrind``, metrics off then on, each in a process of its own
(:func:`serve`) that counts only between the harness' "measure" and "done": its topics
are created, filled and warmed up (Python 3.11 specialises its bytecode on the first
runs) uninstrumented, and nothing of Python's start is counted. The load is
``bench.metrics_bench``'s: Produce v9 at acks=1 from ``bench.saturate``'s clients (8
processes, 5 requests in flight each, one 64 KiB batch per partition, 2 partitions per
request), and Fetch v4 of 2 partitions at 1 MiB each, one at a time as a consumer sends
them. The clients run natively: only the broker's user-space instructions (all its
threads) are counted, not the kernel's (sockets, sendfile, page cache). Instructions
are not cycles: ``bench.metrics_bench`` side by side measured produce's broker CPU per
record about 4% higher with metrics on (2026-11-27) where this counted 1-2% more
instructions: a count here is not the whole of what metrics cost.

A phase's count still moves between runs by up to 2-3% of a fetch (about 10,000
instructions): how the sockets' timing splits the work into turns of the event loop,
when the garbage collector runs. Compare metrics on and off over two or three runs;
what one hook costs is measured best by calling it alone under callgrind.

Needs valgrind and a C compiler (the start and stop of counting are callgrind's client
requests, in a small library compiled on the spot). Takes a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.clients.kafka import KafkaClient
from bench.clients.kafka_fetch import KafkaFetcher, _whole_batches
from bench.saturate import FETCH_MAX_BYTES, FETCH_PARTITION_MAX_BYTES, WORKERS, Job, Load, filled

PARTITIONS = 8
SIZES = (100, 1024)
WARMUP_REQUESTS = 5  # per produce client
PRODUCE_REQUESTS = 10  # per produce client: 80 counted
FETCHES = 100
SCRAPES = 20
FETCHED_PARTITIONS = (0, 1)  # as a bench.saturate fetch client asks them
_TRIGGER = "desc: Trigger: Client Request: "  # a dump's line naming the phase

_CLIENT_REQUESTS = r"""
#include <valgrind/callgrind.h>
void measure_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void measure_stop(const char *name) {
    CALLGRIND_DUMP_STATS_AT(name);
    CALLGRIND_STOP_INSTRUMENTATION;
}
"""


def _compiled(workdir: Path) -> Path:
    source = workdir / "measure.c"
    source.write_text(_CLIENT_REQUESTS)
    library = workdir / "measure.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                   check=True)
    return library


def serve(data_dir: Path, metrics: bool, library: Path) -> None:
    """A broker in this process, counting its instructions while the harness measures:
    one stdin line "measure NAME" starts counting, the next ("done") dumps the count as
    NAME; "quit" stops the broker."""
    from gregor.broker.broker import Broker
    from gregor.config import BrokerConfig
    from gregor.metrics import loop_monitor

    # The loop monitor probes every half second of wall time, which under callgrind
    # (some 50 times slower) would fall on a phase some 50 times as often as on a broker
    # at work, and as often as the machine's load makes it: here it does not probe.
    loop_monitor.PROBE_INTERVAL_S = 24 * 3600.0
    counting = ctypes.CDLL(str(library))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = {"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0"}
    if metrics:
        settings["metrics.listener"] = "http://127.0.0.1:0/metrics"
    broker = Broker(BrokerConfig.load(None, settings))
    loop.run_until_complete(broker.start())
    host, port = broker.advertised_address
    server = broker.metrics_server
    print(json.dumps({"bootstrap": f"{host}:{port}",
                      "metrics_url": None if server is None else server.url}), flush=True)
    lines: asyncio.Queue[str] = asyncio.Queue()
    loop.add_reader(sys.stdin.fileno(), lambda: lines.put_nowait(sys.stdin.readline().strip()))
    while (command := loop.run_until_complete(lines.get())).startswith("measure "):
        # The harness loads the broker once told; its requests wait in the sockets
        # until the loop runs again, counted.
        print("measuring", flush=True)
        counting.measure_start()
        loop.run_until_complete(lines.get())
        counting.measure_stop(command.split(" ", 1)[1].encode())
        print("measured", flush=True)
    loop.run_until_complete(broker.stop())


class _Counted:
    """A broker under callgrind, and the phases counted so far."""

    def __init__(self, workdir: Path, metrics: bool, library: Path) -> None:
        self.out = workdir / f"callgrind-{'on' if metrics else 'off'}"
        data = workdir / f"data-{'on' if metrics else 'off'}"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={self.out}.%p", sys.executable, "-m",
                   "bench.instructions", "--serve", str(data), "--library", str(library)]
        self.proc = subprocess.Popen(command + (["--metrics"] if metrics else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     cwd=Path(__file__).resolve().parent.parent)
        ready = json.loads(self._line())
        self.bootstrap: str = ready["bootstrap"]
        self.metrics_url: str | None = ready["metrics_url"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the broker under callgrind exited ({self.proc.wait()})")
        return line.strip()

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def measure(self, name: str, load: Callable[[], None]) -> None:
        self._send(f"measure {name}")
        assert self._line() == "measuring"
        load()
        self._send("done")
        assert self._line() == "measured"

    def counts(self) -> dict[str, int]:
        """Instructions of each phase measured, by name, once the broker has stopped."""
        self._send("quit")
        self.proc.wait(600)
        found = {}
        for dump in self.out.parent.glob(f"{self.out.name}.*"):
            text = dump.read_text(errors="replace")
            trigger = next((line for line in text.splitlines()
                            if line.startswith(_TRIGGER)), None)
            if trigger is not None:
                total = next(line for line in text.splitlines() if line.startswith("summary:"))
                found[trigger.removeprefix(_TRIGGER)] = int(total.split()[1])
        return found


def _fetches(bootstrap: str, topic: str, end: int, count: int) -> None:
    """``count`` fetches of :data:`FETCHED_PARTITIONS`, each read from 0 again once read
    to ``end``."""
    fetcher = KafkaFetcher(bootstrap)
    offsets = dict.fromkeys(FETCHED_PARTITIONS, 0)
    try:
        for _ in range(count):
            fetcher.sock.sendall(fetcher._request(topic, offsets, FETCH_PARTITION_MAX_BYTES,
                                                  FETCH_MAX_BYTES))
            for partition, records in fetcher._answer(fetcher._read_frame()).items():
                _, offset = _whole_batches(records, offsets[partition], check_crc=False)
                offsets[partition] = 0 if offset >= end else offset
    finally:
        fetcher.close()


def _scrapes(url: str, count: int) -> None:
    for _ in range(count):
        with urllib.request.urlopen(url, timeout=600) as answer:
            answer.read()


def measure(workdir: Path, metrics: bool, load: Load, library: Path) -> dict[str, int]:
    broker = _Counted(workdir, metrics, library)
    try:
        client = KafkaClient(broker.bootstrap)
        for size in SIZES:
            topic = f"i-{size}-{uuid.uuid4().hex[:8]}"
            client.create(topic, PARTITIONS)
            job = Job("produce", broker.bootstrap, topic, PARTITIONS, size)
            load.complete(Job(**{**job.__dict__, "requests": WARMUP_REQUESTS}))
            broker.measure(f"produce {size}", lambda job=job: load.complete(
                Job(**{**job.__dict__, "requests": PRODUCE_REQUESTS})))
            end = filled(size, WARMUP_REQUESTS + PRODUCE_REQUESTS)
            _fetches(broker.bootstrap, topic, end, FETCHES)
            broker.measure(f"fetch {size}", lambda topic=topic, end=end: _fetches(
                broker.bootstrap, topic, end, FETCHES))
        if broker.metrics_url is not None:
            _scrapes(broker.metrics_url, SCRAPES)
            url = broker.metrics_url
            broker.measure("scrape", lambda: _scrapes(url, SCRAPES))
    finally:
        counts = broker.counts()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--library", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path,
                        help="keep callgrind's dumps here (callgrind_annotate reads them)")
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.metrics, args.library)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    workdir = Path(tempfile.mkdtemp(prefix="gregor-instructions-"))
    load = Load()
    try:
        library = _compiled(workdir)
        off, on = (measure(workdir, metrics, load, library) for metrics in (False, True))
    finally:
        load.close()
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for dump in workdir.glob("callgrind-*.*"):
                shutil.move(dump, args.keep / dump.name)
        shutil.rmtree(workdir, ignore_errors=True)
    per = {"produce": WORKERS * PRODUCE_REQUESTS, "fetch": FETCHES}
    print("| phase | instructions off | on | metrics add |\n|---|---|---|---|")
    for name in off:
        requests = per[name.split()[0]]
        print(f"| {name} B, per request | {off[name] / requests:,.0f} | "
              f"{on[name] / requests:,.0f} | {on[name] / off[name] - 1:+.2%} |")
    print(f"| scrape | | {on['scrape'] / SCRAPES:,.0f} | |")


if __name__ == "__main__":
    main()
