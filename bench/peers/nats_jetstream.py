"""NATS JetStream: Debian's nats-server with JetStream on, file storage in the work directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.clients.nats_jetstream import NatsJetStreamClient
from bench.processes import Supervisor, wait_for_port
from gregor.broker.process import free_port


class NatsJetStreamPeer:
    name = "NATS JetStream"
    storage = "file store, written before the publish ack, fsynced every 2 min (default)"

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        self.workdir = workdir / "nats"
        self.supervisor = supervisor
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def version(self) -> str:
        out = subprocess.run(["nats-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
        return out.strip().removeprefix("nats-server: v")

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "nats.log"
        self.proc = self.supervisor.spawn(
            ["nats-server", "-js", "-sd", str(self.workdir / "store"), "-a", "127.0.0.1",
             "-p", str(self.port)], log)
        wait_for_port(self.port, self.proc, 30, log)

    def stop(self) -> None:
        if self.proc is not None:
            self.supervisor.stop(self.proc)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def server_pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def client(self) -> NatsJetStreamClient:
        return NatsJetStreamClient(f"nats://127.0.0.1:{self.port}")
