"""BrokerProcess: a broker in a child process, for tests, benchmarks and tools.

Tests must exercise the broker the way users run it (its own process, real
sockets, real files), including being killed with SIGKILL and restarted on the
same data directory.

The broker binds its own port (port 0 on a first start, so no other process can
take a port picked for it in between) and reports it with ``--ready-file`` once it
really serves: logs recovered, listeners bound, registered in its cluster. Something
accepting on the port proves nothing: it may be another process, or the broker
before it is registered. A restart asks for the same port again, since clients
reconnect to it; if another process took it meanwhile, the broker exits before
opening its logs and ``start`` raises with the broker's own error.
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
    """A port free at this instant, for servers that cannot bind port 0 and report the
    port (ZooKeeper, redis, nats, iperf3). Racy by nature: another process may take it
    before the server binds it, which the caller must detect (the server exits)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    """One broker (``gregor broker start``) on ``data_dir``, listening on ``host``.

    ``port`` 0 lets the broker pick its port on the first start; after ``start`` it
    holds the port the broker bound, which every later start asks for again.
    ``overrides`` are broker properties by Kafka's names (``-o NAME=VALUE``, applied
    over ``config_file``); changes to the dict apply from the next ``start``. The
    broker's output is appended to ``log_path`` (default ``<data_dir>.log`` beside the
    data directory), across restarts. ``ready_file`` (``<data_dir>.ready``) is where
    the broker says it serves.

    ``start``, ``stop`` (SIGTERM: a clean shutdown), ``kill`` (SIGKILL: a crash),
    ``pause``/``resume`` (SIGSTOP/SIGCONT) and ``restart`` act on the process;
    ``bootstrap`` is the ``host:port`` clients use, ``broker_id`` the id the broker
    reported at its latest start, ``pid`` the running process's (None when stopped),
    ``metrics_url`` where it serves metrics (None unless ``metrics.listener`` is set).
    """

    def __init__(self, data_dir: Path, port: int = 0,
                 overrides: dict[str, str] | None = None, log_path: Path | None = None,
                 config_file: Path | None = None, host: str = "127.0.0.1",
                 listeners: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        # Kafka's ``listeners`` (``SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0``) instead of
        # one PLAINTEXT listener on host:port; port is then the first listener's.
        self.listeners = listeners
        self.listener_ports: dict[str, int] = {}
        self.overrides = dict(overrides or {})
        self.config_file = config_file
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}.log"
        self.ready_file = self.data_dir.parent / f"{self.data_dir.name}.ready"
        self.broker_id: int | None = None
        self.metrics_url: str | None = None
        self.proc: subprocess.Popen | None = None
        self._log_start = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_for(self, listener: str, host: str | None = None) -> str:
        """``host:port`` of one of ``listeners`` (by name) once started."""
        return f"{host or self.host}:{self.listener_ports[listener]}"

    def _listeners_arg(self) -> str:
        """The listeners to ask for: on a restart, each on the port it had."""
        if self.listeners is None:
            return f"PLAINTEXT://{self.host}:{self.port}"
        items = []
        for item in self.listeners.split(","):
            name, _, address = item.partition("://")
            host, _, port = address.rpartition(":")
            bound = self.listener_ports.get(name.strip().upper())
            items.append(f"{name}://{host}:{bound}" if port == "0" and bound else item)
        return ",".join(items)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        """Start the broker and wait until it serves: its own word, its ready file,
        not a successful connect. Raises RuntimeError, with what the broker logged,
        if it exits first (a port in use, a bad config) or is not ready in time."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"broker on {self.data_dir} is already running")
        args = [sys.executable, "-m", "gregor.cli.main", "broker", "start",
                # Several directories (JBOD) when the overrides name them.
                "--log-dirs", self.overrides.get("log.dirs", str(self.data_dir)),
                "--listeners", self._listeners_arg(),
                "--ready-file", str(self.ready_file)]
        if self.config_file is not None:
            args += ["--config", str(self.config_file)]
        for name, value in self.overrides.items():
            args += ["--override", f"{name}={value}"]
        # Whatever a killed run left there is not this run's word.
        self.ready_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while (ready := self._read_ready()) is None:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                raise RuntimeError(f"broker exited with {code} before serving on "
                                   f"{self.bootstrap}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(_POLL_S)
        self.port, self.broker_id = ready["port"], ready["broker_id"]
        self.listener_ports = ready.get("listeners", {})
        self.metrics_url = ready.get("metrics_url")
        return self

    def _read_ready(self) -> dict | None:
        """The ready file, if our broker wrote it (it is written by an atomic rename)."""
        try:
            ready = json.loads(self.ready_file.read_text())
        except FileNotFoundError:
            return None
        assert self.proc is not None
        return ready if ready["pid"] == self.proc.pid else None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the broker logged since its latest start."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: a clean shutdown (flush, checkpoints, clean marker). A
        paused broker is resumed to receive it. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)
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
        """A clean stop and a start on the same data and port."""
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
