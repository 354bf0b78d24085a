"""ZooKeeperServer: a standalone ZooKeeper (Debian's package) in a child process.

What ``gregor zookeeper start``, ``scripts/run-cluster.sh`` and the cluster tests
run: Kafka's own ``zookeeper-server-start.sh`` in spirit, with the server on
loopback, its data under a directory of ours, the admin web server off (it would
take port 8080) and the ``ruok`` four-letter word allowed, which is how readiness
is told: a ready server answers ``imok``.

ZooKeeper cannot report a port it picked, so with no port given one is chosen
and, should another process take it first, the next start tries another.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from gregor.broker.process import free_port

CLASSPATH = ":".join([
    "/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar", "/usr/share/java/log4j-1.2.jar"])
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_POLL_S = 0.05
_BIND_ATTEMPTS = 5


class ZooKeeperServer:
    def __init__(self, data_dir: Path, port: int = 0, host: str = "127.0.0.1",
                 tick_ms: int = 200, log_path: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.requested_port = port
        self.port = port
        # Sessions may be as short as 2 ticks: tests use short broker session timeouts.
        self.tick_ms = tick_ms
        self.log_path = log_path or self.data_dir / "zookeeper.log"
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={2 * self.tick_ms}",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "maxClientCnxns=0",
        ]) + "\n")
        return config

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        for _ in range(_BIND_ATTEMPTS):
            if not self.requested_port:
                self.port = free_port()
            if self._start_once(timeout):
                return self
            if self.requested_port:
                break  # the port asked for is taken: nothing else to try
        raise RuntimeError(f"ZooKeeper could not bind {self.connect}:\n{self.log_tail()}")

    def _start_once(self, timeout: float) -> bool:
        """Start and wait for ``imok``; False if the port was taken."""
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", CLASSPATH, MAIN_CLASS, str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # Its own process group: a Ctrl-C in the terminal reaches whoever started
            # it, which stops it in order (brokers first).
            start_new_session=True,
            env={**os.environ, "ZOO_LOG4J_PROP": "INFO,CONSOLE"})
        log.close()
        deadline = time.monotonic() + timeout
        while not self.is_ok():
            if self.proc.poll() is not None:
                self.proc = None
                if "Address already in use" in self.log_tail():
                    return False
                raise RuntimeError(f"ZooKeeper exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ZooKeeper not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(_POLL_S)
        return True

    def is_ok(self) -> bool:
        """ZooKeeper's own readiness word: ``ruok`` answered by ``imok``."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
