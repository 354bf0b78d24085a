"""BrokerProcess: a broker in a child process, for tests, benchmarks and tools.

Tests must exercise the broker the way users run it (its own process, real
sockets, real files), including being killed with SIGKILL and restarted on the
same data directory.

The broker binds its own port (port 0 on a first start, so no other process can
take a port picked for it in between) and reports it with ``--ready-file`` once it
really serves: logs recovered, listeners bound, registered in its cluster. A
restart asks for the same port again, since clients reconnect to it; if another
process took it meanwhile, the broker exits at once and ``start`` says why.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_POLL_S = 0.02


def free_port() -> int:
    """A port free at this instant, for servers that cannot report the port they bound
    (redis, nats, iperf3): racy by nature, so callers retry on a bind failure."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, port: int = 0,
                 overrides: dict[str, str] | None = None, log_path: Path | None = None,
                 config_file: Path | None = None, host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.overrides = dict(overrides or {})
        self.config_file = config_file
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}.log"
        self._ready_file = self.data_dir.parent / f"{self.data_dir.name}.ready"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        """Start the broker and wait until it serves (its own word, not a connect)."""
        args = [sys.executable, "-m", "gregor.cli.main", "broker", "start",
                "--log-dirs", str(self.data_dir),
                "--listeners", f"PLAINTEXT://{self.host}:{self.port}",
                "--ready-file", str(self._ready_file)]
        if self.config_file is not None:
            args += ["--config", str(self.config_file)]
        for name, value in self.overrides.items():
            args += ["--override", f"{name}={value}"]
        self._ready_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        deadline = time.monotonic() + timeout
        while not self._ready_file.exists():
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                raise RuntimeError(f"broker exited with {code} before serving:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(_POLL_S)
        self.port = json.loads(self._ready_file.read_text())["port"]
        return self

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int | None:
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

    def pause(self) -> None:
        """SIGSTOP: a broker that stops answering (a long GC pause, a stuck disk)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
