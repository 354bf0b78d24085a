"""Redis Streams: Debian's redis-server with the append-only file fsynced every second.

Automatic AOF rewrites are off: a rewrite forks the server to compact a file
that a short benchmark never needs compacted, and the fork's CPU and
copy-on-write would be measured as Redis's produce cost. Snapshots (RDB) are
off too, as the AOF is the durability under test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.clients.redis_streams import RedisStreamsClient
from bench.processes import Supervisor, wait_for_port
from gregor.broker.process import free_port


class RedisStreamsPeer:
    name = "Redis Streams"
    storage = "memory + append-only file, fsync every second (appendfsync everysec)"

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        self.workdir = workdir / "redis"
        self.supervisor = supervisor
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def version(self) -> str:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
        return next(p[2:] for p in out.split() if p.startswith("v="))

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        self.proc = self.supervisor.spawn(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.workdir), "--appendonly", "yes", "--appendfsync", "everysec",
             "--auto-aof-rewrite-percentage", "0", "--save", "", "--daemonize", "no",
             "--protected-mode", "no"], log)
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

    def client(self) -> RedisStreamsClient:
        return RedisStreamsClient(self.port)
