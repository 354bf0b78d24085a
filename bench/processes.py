"""Server processes started by the benchmark, and the guarantee that none outlives it.

Each server runs in a session (process group) of its own, so stopping it also
stops whatever it forked, and a Ctrl-C in the terminal reaches the benchmark
first, which then stops the servers in order. Whatever is still alive when the
benchmark leaves (error, Ctrl-C, SIGTERM) is killed by :meth:`Supervisor.close`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, log_path: Path) -> None:
    """Block until something accepts on ``port``; fail early if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}; see {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.args[0]} did not listen on {port} within {timeout}s")


class Supervisor:
    """Starts servers in their own process groups and stops every one of them."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []

    def spawn(self, args: Sequence[str], log_path: Path, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd,
                                    env={**os.environ, **(env or {})}, start_new_session=True)
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM,
             timeout: float = 15.0) -> None:
        """Ask the process group to stop with ``sig``; SIGKILL it if it does not."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill(proc)
        # Children of the server may outlive it in its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc in self._procs:
            self._procs.remove(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        """Kill everything still running; safe to call more than once."""
        while self._procs:
            proc = self._procs.pop()
            if proc.poll() is None:
                self._kill(proc)


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks stop the servers."""
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
