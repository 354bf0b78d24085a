"""A Spark standalone cluster on this machine, started from the PySpark package itself
(``spark-class``, no Spark download): the master and workers the README starts by hand,
for the tests and the benchmark.

Each daemon runs in the foreground in a session of its own, its log read line by line,
so that callers wait for what it says (the master's address, a worker's registration)
rather than for a while.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 120.0
SHARED_APP_CONF = {"spark.cores.max": "2", "spark.executor.cores": "1",
                   "spark.executor.memory": "512m"}
"""An application that leaves room for another: two one-core executors of 512 MiB, one
per worker (the master spreads executors out)."""


class SparkDaemon:
    """One master or worker process and the lines it has logged."""

    def __init__(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable}
        self.name = name
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._read, name=f"log-{name}", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first logged line matching ``pattern``, waiting for it to be logged."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + START_TIMEOUT_S
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if found := regex.search(line):
                        return found
                seen = len(self.lines)
                log = "".join(self.lines)
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} ended:\n{log}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name} never logged {pattern!r}:\n{log}")
                self._changed.wait(left)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class StandaloneCluster:
    """A master on loopback and ``workers`` workers of ``cores`` cores each."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 2,
                 memory: str = "2g") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.url = ""
        """``spark://127.0.0.1:PORT``, for applications"""
        self.web = ""
        """the master's web UI, whose ``/json/`` says what runs where"""
        self._daemons: list[SparkDaemon] = []

    def start(self) -> StandaloneCluster:
        master = SparkDaemon("master", "org.apache.spark.deploy.master.Master",
                             "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        self._daemons.append(master)
        try:
            self.url = master.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
            self.web = master.wait_for(r"MasterWebUI.* started at (http://\S+)").group(1)
            for index in range(1, self.workers + 1):
                self._daemons.append(SparkDaemon(
                    f"worker-{index}", "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(self.work / f"worker-{index}"), self.url))
            for worker in self._daemons[1:]:
                worker.wait_for("Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, Any]:
        """The master's view: workers (with cores used), active and completed apps."""
        with urllib.request.urlopen(f"{self.web}/json/", timeout=30) as answer:
            return json.load(answer)  # type: ignore[no-any-return]

    def stop(self) -> None:
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
