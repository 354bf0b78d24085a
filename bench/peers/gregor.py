"""gregor itself, started exactly as users run it, through :class:`BrokerProcess`."""

from __future__ import annotations

import shutil
from importlib import metadata
from pathlib import Path

from bench.clients.kafka import LOAD_GENERATOR, KafkaClient
from gregor.broker.process import BrokerProcess


class GregorPeer:
    name = "gregor"
    storage = "segment files in the page cache (acks=all: written, not fsynced, like Kafka)"
    load_generator = LOAD_GENERATOR
    python_client = False

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir / "gregor"
        self.data_dir = self.workdir / "data"
        self.broker = BrokerProcess(self.data_dir, overrides=overrides,
                                    log_path=self.workdir / "broker.log")

    def version(self) -> str:
        return metadata.version("gregor")

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def start(self) -> None:
        self.broker.start(timeout=60)

    def stop(self) -> None:
        self.broker.stop()

    def cleanup(self) -> None:
        self.broker.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def server_pids(self) -> list[int]:
        proc = self.broker.proc
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def client(self) -> KafkaClient:
        return KafkaClient(self.bootstrap)
