"""``scripts/run-cluster.sh`` run as the README has users run it, for the tests that
start it (tests/cluster/test_run_cluster_script.py, tests/console): on a loopback address
and in a data directory of its own (GREGOR_CLUSTER_HOST, GREGOR_CLUSTER_DATA), so the
script's fixed ports do not meet a cluster someone runs on 127.0.0.1 or another test's."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
from cluster.network import loopback_block  # tests/cluster, also from other directories

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run-cluster.sh"
WAIT_S = 60.0


def started_by(data: Path) -> list[psutil.Process]:
    """Live processes naming the cluster's data directory on their command line: the
    brokers, ``gregor zookeeper start`` and its JVM."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(str(data) in arg for arg in process.info["cmdline"] or ()):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


class RunningCluster:
    def __init__(self, work: Path, *args: str) -> None:
        """The script started in ``work`` with ``args`` (e.g. ``--secure``)."""
        self.host = f"{loopback_block()}.1"
        self.data = work / "data"
        self.bootstrap = ",".join(f"{self.host}:{port}" for port in (9092, 9093, 9094))
        env = {**os.environ, "GREGOR_CLUSTER_HOST": self.host,
               "GREGOR_CLUSTER_DATA": str(self.data)}
        self.process = subprocess.Popen([str(SCRIPT), *args], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        self.ready = False

    def wait_ready(self) -> None:
        """Read the script's output up to its "cluster ready" line, once: a module's tests
        share the cluster, and a second read would wait for a line already read."""
        assert self.process.stdout is not None
        if self.ready:
            return
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("cluster ready"):
                self.ready = True
                return
        raise AssertionError("run-cluster.sh ended before the cluster was ready:\n"
                             + "".join(self.output))

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C: the script's exit status, once it is gone."""
        self.process.send_signal(signal.SIGTERM)
        rest, _ = self.process.communicate(timeout=WAIT_S)
        self.output.append(rest)
        return self.process.returncode


def running_cluster(cluster: RunningCluster) -> Iterator[RunningCluster]:
    """A fixture's body: ``cluster``, then whatever it left running is killed."""
    try:
        yield cluster
    finally:
        if cluster.process.poll() is None:
            cluster.process.send_signal(signal.SIGTERM)
            try:
                cluster.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                cluster.process.kill()
        for leftover in started_by(cluster.data):
            leftover.kill()
