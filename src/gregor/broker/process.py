"""BrokerProcess: a broker in a child process, for tests, benchmarks and tools.

Tests must exercise the broker the way users run it (its own process, real
sockets, real files), including being killed with SIGKILL and restarted on the
same data directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, port: int | None = None,
                 overrides: dict[str, str] | None = None, log_path: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.log_path = log_path or self.data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        args = [sys.executable, "-m", "gregor.cli.main", "broker", "start",
                "--log-dirs", str(self.data_dir),
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}"]
        for name, value in self.overrides.items():
            args += ["--override", f"{name}={value}"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen on {self.port} within {timeout}s")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait: a clean shutdown (flush, checkpoints, clean marker)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: the crash case, nothing gets flushed or checkpointed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
