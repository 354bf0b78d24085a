"""What the peers run as a plain server process have in common: a free port, a work
directory, a supervised child process, and stopping and cleaning up after it."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.processes import Supervisor, wait_for_port
from gregor.broker.process import free_port


class SupervisedServer:
    # The signal the server's own users stop it with.
    stop_signal: int = signal.SIGTERM

    def __init__(self, workdir: Path, supervisor: Supervisor) -> None:
        self.workdir = workdir
        self.supervisor = supervisor
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def launch(self, args: Sequence[str], log_name: str, cwd: Path | None = None) -> None:
        """Start the server in its work directory and wait until it listens."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / log_name
        self.proc = self.supervisor.spawn(args, log, cwd=cwd)
        wait_for_port(self.port, self.proc, 30, log)

    def stop(self) -> None:
        if self.proc is not None:
            self.supervisor.stop(self.proc, self.stop_signal)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def server_pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []
