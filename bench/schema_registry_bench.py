"""The schema registry's targets: 1,000 distinct schemas registered in under 30 s, and
``GET /schemas/ids/{id}`` from 64 concurrent clients with a p99 under 10 ms.

Run with ``python -m bench.schema_registry_bench`` (``--quick`` for a smoke run). One
broker and one ``gregor schema-registry`` process; registrations go one after another
over one kept-alive connection (each waits for its record to be written to
``_schemas`` and read back); the lookups come from :data:`CLIENT_PROCESSES` processes
of :data:`THREADS_PER_PROCESS` threads, each with a kept-alive connection asking for
the ids in turn as fast as answers come (closed loop), for :data:`LOOKUP_S` seconds.
The clients share the machine with the registry: on a 2-core machine they take about
half of it, so the rate is a floor of the registry's.

It prints a table and writes ``schema_registry_bench.json`` to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
from pathlib import Path

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess

OUT = Path(__file__).resolve().parent / "out"
SCHEMAS = 1000
CLIENT_PROCESSES = 4
THREADS_PER_PROCESS = 16
LOOKUP_S = 10.0


def register(address: str, count: int) -> tuple[float, list[int]]:
    """Seconds to register ``count`` distinct schemas, and their ids."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port))
    ids = []
    started = time.monotonic()
    for n in range(count):
        schema = json.dumps({"type": "record", "name": f"Bench{n}",
                             "fields": [{"name": "n", "type": "long"}]})
        connection.request("POST", f"/subjects/bench-{n}-value/versions",
                           json.dumps({"schema": schema}),
                           {"Content-Type": "application/vnd.schemaregistry.v1+json"})
        answer = connection.getresponse()
        body = json.loads(answer.read())
        if answer.status != 200:
            raise RuntimeError(f"registration {n} refused: {body}")
        ids.append(body["id"])
    return time.monotonic() - started, ids


def _lookup_process(address: str, ids: list[int], seconds: float, threads: int,
                    results: multiprocessing.Queue) -> None:
    host, port = address.rsplit(":", 1)
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(first: int) -> None:
        connection = http.client.HTTPConnection(host, int(port))
        mine = []
        n = first
        while time.monotonic() < stop:
            started = time.perf_counter()
            connection.request("GET", f"/schemas/ids/{ids[n % len(ids)]}")
            answer = connection.getresponse()
            answer.read()
            mine.append(time.perf_counter() - started)
            if answer.status != 200:
                raise RuntimeError(f"lookup answered {answer.status}")
            n += 7
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put(latencies)


def lookups(address: str, ids: list[int], seconds: float, processes: int,
            threads: int) -> dict[str, float]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    clients = [multiprocessing.Process(target=_lookup_process,
                                       args=(address, ids, seconds, threads, results))
               for _ in range(processes)]
    for process in clients:
        process.start()
    latencies = sorted(value for _ in clients for value in results.get())
    for process in clients:
        process.join()
    return {"lookups": len(latencies), "per_s": len(latencies) / seconds,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 schemas, 2 s of lookups")
    args = parser.parse_args(argv)
    count, seconds = (100, 2.0) if args.quick else (SCHEMAS, LOOKUP_S)
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as work:
        broker = BrokerProcess(Path(work) / "data",
                               overrides={"group.initial.rebalance.delay.ms": "0"}).start()
        registry = RegistryProcess(broker.bootstrap)
        try:
            registry.start()
            took, ids = register(registry.listen, count)
            lookup = lookups(registry.listen, ids, seconds, CLIENT_PROCESSES,
                             THREADS_PER_PROCESS)
        finally:
            registry.stop()
            broker.stop()
    result = {"schemas": count, "registration_s": took, **lookup,
              "clients": CLIENT_PROCESSES * THREADS_PER_PROCESS}
    print(f"{count} distinct schemas registered in {took:.1f} s (target: 1,000 under 30 s)")
    print(f"GET /schemas/ids/{{id}} from {result['clients']} clients: {lookup['per_s']:.0f}/s, "
          f"p50 {lookup['p50_ms']:.1f} ms, p99 {lookup['p99_ms']:.1f} ms (target: p99 under 10 ms)")
    OUT.mkdir(exist_ok=True)
    (OUT / "schema_registry_bench.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
