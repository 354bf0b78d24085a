"""NATS JetStream: Debian's nats-server with JetStream on, file storage in the work directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.clients.nats_jetstream import LOAD_GENERATOR, NatsJetStreamClient
from bench.peers.supervised_server import SupervisedServer
from bench.processes import Supervisor


class NatsJetStreamPeer(SupervisedServer):
    name = "NATS JetStream"
    storage = "file store, written before the publish ack, fsynced every 2 min (default)"
    load_generator = LOAD_GENERATOR
    python_client = True

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        super().__init__(workdir / "nats", supervisor)

    def version(self) -> str:
        out = subprocess.run(["nats-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
        return out.strip().removeprefix("nats-server: v")

    def start(self) -> None:
        self.launch(["nats-server", "-js", "-sd", str(self.workdir / "store"), "-a", "127.0.0.1",
                     "-p", str(self.port)], "nats.log")

    def client(self) -> NatsJetStreamClient:
        return NatsJetStreamClient(f"nats://127.0.0.1:{self.port}")
