"""The schema registry's targets: 1,000 distinct schemas registered in under 30 s, and
``GET /schemas/ids/{id}`` from 64 concurrent clients with a p99 under 10 ms; and the
other call serializers make on their hot path, ``POST /subjects/{s}`` (the lookup of
``auto.register.schemas=false``), from the same clients.

Run with ``python -m bench.schema_registry_bench`` (``--quick`` for a smoke run). One
broker and one ``gregor schema-registry`` process; registrations go one after another
over one kept-alive connection (each waits for its record to be written to
``_schemas`` and read back); the calls come from :data:`CLIENT_PROCESSES` processes of
:data:`CONNECTIONS_PER_PROCESS` kept-alive connections each, every connection asking
for the ids (or subjects) in turn as fast as answers come (closed loop), for
:data:`CALLS_S` seconds.

The clients share the machine with the registry, so each run reports the CPU of both
(cores: CPU seconds per wall second). The clients are raw HTTP/1.1 over asyncio
(uvloop) connections, each request's bytes built once, so that a call costs the
client a small part of what it costs the registry: a run whose clients used more CPU
per call than the registry measured them, not it, and the table says so. With 64
clients each waiting for its answer, a p99 under 10 ms needs more than 6,400
answers/s.

The id lookups are measured twice, from :data:`CLIENT_PROCESSES` processes and from
twice as many (the same 64 connections spread wider): if the clients were the limit,
more processes would get more answers a second.

It prints a table and writes ``schema_registry_bench.json`` to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.cpu import cpu_seconds
from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess

OUT = Path(__file__).resolve().parent / "out"
SCHEMAS = 1000
CLIENT_PROCESSES = 2
CONNECTIONS_PER_PROCESS = 32
CALLS_S = 10.0
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


def schema_text(n: int) -> str:
    return json.dumps({"type": "record", "name": f"Bench{n}",
                       "fields": [{"name": "n", "type": "long"}]})


def register(address: str, count: int) -> tuple[float, list[int]]:
    """Seconds to register ``count`` distinct schemas, and their ids."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port))
    ids = []
    started = time.monotonic()
    for n in range(count):
        connection.request("POST", f"/subjects/bench-{n}-value/versions",
                           json.dumps({"schema": schema_text(n)}),
                           {"Content-Type": MEDIA_TYPE})
        answer = connection.getresponse()
        body = json.loads(answer.read())
        if answer.status != 200:
            raise RuntimeError(f"registration {n} refused: {body}")
        ids.append(body["id"])
    return time.monotonic() - started, ids


def id_requests(ids: list[int]) -> list[bytes]:
    return [f"GET /schemas/ids/{schema_id} HTTP/1.1\r\nHost: registry\r\n\r\n".encode()
            for schema_id in ids]


def lookup_requests(count: int) -> list[bytes]:
    """``POST /subjects/{s}``: is this schema registered under the subject (and as
    which version and id)?"""
    requests = []
    for n in range(count):
        body = json.dumps({"schema": schema_text(n)}).encode()
        requests.append(f"POST /subjects/bench-{n}-value HTTP/1.1\r\nHost: registry\r\n"
                        f"Content-Type: {MEDIA_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
                        .encode() + body)
    return requests


class _Client(asyncio.Protocol):
    """One kept-alive connection asking back to back: the next request goes as soon as
    the whole answer (its ``content-length``) is in."""

    def __init__(self, requests: list[bytes], first: int, stop_at: float,
                 latencies: list[float], done: asyncio.Future[None]) -> None:
        self.requests = requests
        self.next = first
        self.stop_at = stop_at
        self.latencies = latencies
        self.done = done
        self.buffer = b""
        self.sent = 0.0
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        request = self.requests[self.next % len(self.requests)]
        self.next += 7
        self.sent = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        length = next(int(line[15:]) for line in self.buffer[:end].lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))
        if len(self.buffer) < end + 4 + length:
            return
        now = time.perf_counter()
        if self.buffer[9:12] != b"200" and not self.done.done():
            self.done.set_exception(RuntimeError(f"answered {self.buffer[:end + 4 + length]!r}"))
        self.latencies.append(now - self.sent)
        self.buffer = self.buffer[end + 4 + length:]
        if now < self.stop_at:
            self._send()
        elif not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("the registry closed"))


async def _clients(address: str, requests: list[bytes], seconds: float,
                   connections: int, first: int) -> list[float]:
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds
    finished = []
    for n in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        await loop.create_connection(
            lambda n=n, done=done: _Client(requests, first + n, stop_at, latencies, done),
            host, int(port))
        finished.append(done)
    await asyncio.gather(*finished)
    return latencies


def _client_process(address: str, requests: list[bytes], seconds: float, connections: int,
                    first: int, results: multiprocessing.Queue) -> None:
    import uvloop

    started = time.process_time()
    latencies = uvloop.run(_clients(address, requests, seconds, connections, first))
    results.put((latencies, time.process_time() - started))


@dataclass
class CallLoad:
    call: str
    client_processes: int
    calls: int
    per_s: float
    p50_ms: float
    p99_ms: float
    registry_cores: float
    client_cores: float

    def cpu_us(self, cores: float) -> float:
        """CPU microseconds per answer of a side that used ``cores``."""
        return cores / self.per_s * 1e6 if self.per_s else 0.0

    @property
    def client_bound(self) -> bool:
        """The clients spent more CPU per call than the registry did."""
        return self.client_cores >= self.registry_cores


def calls(call: str, registry: RegistryProcess, requests: list[bytes], seconds: float,
          processes: int = CLIENT_PROCESSES,
          connections: int = CONNECTIONS_PER_PROCESS) -> CallLoad:
    assert registry.process is not None
    results: multiprocessing.Queue = multiprocessing.Queue()
    clients = [multiprocessing.Process(
        target=_client_process,
        args=(registry.listen, requests, seconds, connections, n * connections, results))
        for n in range(processes)]
    registry_cpu = cpu_seconds([registry.process.pid])
    started = time.perf_counter()
    for process in clients:
        process.start()
    answers = [results.get() for _ in clients]
    wall = time.perf_counter() - started
    registry_cpu = cpu_seconds([registry.process.pid]) - registry_cpu
    for process in clients:
        process.join()
    latencies = sorted(value for found, _ in answers for value in found)
    return CallLoad(call, processes, len(latencies), len(latencies) / seconds,
                    statistics.median(latencies) * 1000,
                    latencies[int(len(latencies) * 0.99)] * 1000,
                    registry_cpu / wall, sum(cpu for _, cpu in answers) / wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 schemas, 2 s of calls")
    args = parser.parse_args(argv)
    count, seconds = (100, 2.0) if args.quick else (SCHEMAS, CALLS_S)
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as work:
        broker = BrokerProcess(Path(work) / "data",
                               overrides={"group.initial.rebalance.delay.ms": "0"}).start()
        registry = RegistryProcess(broker.bootstrap)
        try:
            registry.start()
            took, ids = register(registry.listen, count)
            clients = CLIENT_PROCESSES * CONNECTIONS_PER_PROCESS
            loads = [calls("GET /schemas/ids/{id}", registry, id_requests(ids), seconds),
                     calls("GET /schemas/ids/{id}", registry, id_requests(ids), seconds,
                           2 * CLIENT_PROCESSES, clients // (2 * CLIENT_PROCESSES)),
                     calls("POST /subjects/{s}", registry, lookup_requests(count), seconds)]
        finally:
            registry.stop()
            broker.stop()
    result = {"schemas": count, "registration_s": took, "clients": clients,
              "calls": [asdict(load) for load in loads]}
    print(f"{count} distinct schemas registered in {took:.1f} s (target: 1,000 under 30 s)")
    print(f"\n{clients} closed-loop clients, {seconds:.0f} s each (target: "
          "GET /schemas/ids/{id} p99 under 10 ms)\n")
    print("| call | client processes | answers/s | p50 ms | p99 ms | registry cores "
          "| registry CPU per answer | client cores | client CPU per answer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for load in loads:
        bound = " (client-bound)" if load.client_bound else ""
        print(f"| `{load.call}` | {load.client_processes} | {load.per_s:,.0f} "
              f"| {load.p50_ms:.2f} | {load.p99_ms:.2f} | {load.registry_cores:.2f} "
              f"| {load.cpu_us(load.registry_cores):.0f} µs | {load.client_cores:.2f}{bound} "
              f"| {load.cpu_us(load.client_cores):.0f} µs |")
    OUT.mkdir(exist_ok=True)
    (OUT / "schema_registry_bench.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
