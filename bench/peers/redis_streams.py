"""Redis Streams: Debian's redis-server with the append-only file fsynced every second.

Automatic AOF rewrites are off: a rewrite forks the server to compact a file
that a short benchmark never needs compacted, and the fork's CPU and
copy-on-write would be measured as Redis's produce cost. Snapshots (RDB) are
off too, as the AOF is the durability under test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.clients.redis_streams import LOAD_GENERATOR, RedisStreamsClient
from bench.peers.supervised_server import SupervisedServer
from bench.processes import Supervisor


class RedisStreamsPeer(SupervisedServer):
    name = "Redis Streams"
    storage = "memory + append-only file, fsync every second (appendfsync everysec)"
    load_generator = LOAD_GENERATOR
    python_client = False

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        super().__init__(workdir / "redis", supervisor)

    def version(self) -> str:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
        return next(p[2:] for p in out.split() if p.startswith("v="))

    def start(self) -> None:
        self.launch(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.workdir), "--appendonly", "yes", "--appendfsync", "everysec",
             "--auto-aof-rewrite-percentage", "0", "--save", "", "--daemonize", "no",
             "--protected-mode", "no"], "redis.log")

    def client(self) -> RedisStreamsClient:
        return RedisStreamsClient(self.port)
