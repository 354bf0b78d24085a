"""``gregor pipeline run`` as a user runs it (here the warehouse stream, the quickest
pipeline): a process of its own with a local Spark, stopped with Ctrl-C (SIGINT to its
process group, as a terminal sends it) and restarted from its checkpoint.

This module starts no SparkSession in the test process: the CLI's is the only one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from gregor.broker.process import BrokerProcess

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

TIMEOUT_S = 120.0
# 80 micro-batches of 50: Ctrl-C after the first always lands mid-stream, however fast
# the machine.
EVENTS = 4000


def gregor(*args: str) -> list[str]:
    return [sys.executable, "-m", "gregor.cli.main", *args]


def committed_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    return sorted(int(p.name) for p in commits.glob("[0-9]*")) if commits.exists() else []


def last_offsets(checkpoint: Path) -> dict:
    """The source offsets of the newest batch in the offset log (its last line)."""
    offsets = checkpoint / "offsets"
    newest = max(offsets.glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(newest.read_text().splitlines()[-1])


def default_sigint() -> None:
    """A terminal's foreground job has SIGINT at its default even when pytest itself was
    started with it ignored (``&`` in a script), which the child would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_pipeline_cleanly_and_a_restart_resumes(
    fresh_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = fresh_broker.start().bootstrap
    generate = subprocess.run(
        gregor("pipeline", "generate", "activity", "--rate", "5000", "--count", str(EVENTS),
               "-b", bootstrap),
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert generate.returncode == 0, generate.stderr
    checkpoint = tmp_path / "checkpoint"
    output = tmp_path / "warehouse"
    run = gregor("pipeline", "run", "warehouse", "--topic", "activity", "--output", str(output),
                 "--checkpoint", str(checkpoint), "-b", bootstrap)
    # 50 events per micro-batch: the stream is still busy when Ctrl-C arrives.
    process = subprocess.Popen(
        [*run, "--max-offsets-per-trigger", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_sigint,
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not committed_batches(checkpoint):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no micro-batch was committed"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    assert stderr.splitlines()[-1] == (
        "gregor: interrupted; stopping the pipeline (a restart with the same --checkpoint "
        "resumes)"
    )
    before = committed_batches(checkpoint)
    assert last_offsets(checkpoint)["activity"]["0"] < EVENTS, "stopped too late to tell"

    resumed = subprocess.run([*run, "--available-now"], capture_output=True, text=True,
                             timeout=TIMEOUT_S)
    assert resumed.returncode == 0, resumed.stderr
    after = committed_batches(checkpoint)
    # The same checkpoint went on: earlier batches kept, new ones numbered after them,
    # and the input read to its end.
    assert after[: len(before)] == before and after == list(range(len(after)))
    assert len(after) > len(before)
    assert last_offsets(checkpoint)["activity"]["0"] == EVENTS
    # Each record once in the warehouse: the micro-batch cut short by Ctrl-C was run
    # again, and whatever of it had been written before was not written twice.
    table = pq.read_table(output, columns=["offset"])
    assert sorted(table.column("offset").to_pylist()) == list(range(EVENTS))


def test_ctrl_c_while_spark_starts_is_one_line_and_130(fresh_broker: BrokerProcess,
                                                       tmp_path: Path) -> None:
    bootstrap = fresh_broker.start().bootstrap
    process = subprocess.Popen(
        gregor("pipeline", "run", "activity", "--checkpoint", str(tmp_path / "checkpoint"),
               "-b", bootstrap),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_sigint,
    )
    try:
        # Spark is starting once its JVM runs (a child of gregor's own process).
        deadline = time.monotonic() + TIMEOUT_S
        while not any("java" in child.name() for child in
                      psutil.Process(process.pid).children(recursive=True)):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "Spark's JVM never started"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    assert stderr.splitlines() == [
        "gregor: interrupted; stopping the pipeline (a restart with the same --checkpoint "
        "resumes)"], stderr

