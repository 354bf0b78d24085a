"""Shared fixtures: a real broker process, and helpers to talk to it with real clients."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess

SHARED_BY_DIRECTORY = ("console",)
"""Directories whose tests share things started once per process: the console, its
broker and the browser."""

SHARED_SPARK_CLUSTER = ("tests/spark/test_standalone_cluster.py",
                        "tests/spark/test_pipelines_on_cluster.py")
"""The modules that run applications on the standalone Spark cluster (tests/spark's
session fixture ``cluster``, a master and two workers): one worker runs them all, so the
cluster, and the application their tests share (``cluster_spark``), start once. Every
other Spark module starts a session of its own anyway."""

SPLIT_BY_TEST = ("tests/cluster/test_failover.py",
                 "tests/cluster/test_cluster_transactions.py",
                 "tests/spark/test_pipeline_cli.py")
"""Modules whose tests are units of their own: each starts a cluster of its own (no module
fixture), and together they were the longest unit of all (tests/cluster at 06:00 UTC on
29 Nov 2026, load 10-15: test_failover.py 741 s, test_cluster_transactions.py 334 s of
2,316 s), too long for one worker; split, they fill whichever worker is free, which evens
out the end of the run. test_pipeline_cli.py's tests each run ``gregor pipeline`` processes
on a broker of their own (no Spark in the worker): 259 s and 185 s of its 460 s in the
suite at 10:30 UTC, in one unit the longest after the standalone cluster's."""

SLOWEST_FIRST = (
    "tests/spark standalone cluster", "tests/cluster/test_shutdown.py",
    "tests/spark/test_sink_exactly_once.py",
    "tests/spark/test_pipeline_cli.py::"
    "test_ctrl_c_stops_the_pipeline_cleanly_and_a_restart_resumes",
    "tests/spark/test_connector.py", "tests/spark/test_pipelines.py",
    "tests/spark/test_pipeline_cli.py::"
    "test_ctrl_c_during_a_batch_export_is_one_line_and_a_rerun_completes",
    "tests/spark/test_kafka_options.py", "tests/cluster/test_run_cluster_script.py",
    "tests/console", "tests/spark/test_session.py", "tests/spark/test_confluent_framing.py",
    "tests/spark/test_jvm_partition_reader.py", "tests/spark/test_source_exactness.py",
    "tests/spark/test_data_loss.py", "tests/spark/test_jvm_planning.py",
)
"""The units of work that take longest, longest first (by the sums of their tests'
durations in the full suite at 16:00 UTC on 29 Nov 2026, load 3-17: the standalone
cluster's 755 s, test_sink_exactly_once.py 415 with its driver-killed test, which ran
apart then, test_connector.py 404, test_pipeline_cli.py's Ctrl-C test 325,
test_pipelines.py 303, the rest 50-135 s; the workers' totals 1,435-1,443 s). Handed out
before all others, so that no long unit starts last while the other workers sit idle; a
cluster module second, so that the first units do not all start Spark's JVM at once. The
rest go by their number of tests, as pytest-xdist orders them (``SPLIT_BY_TEST``'s single
tests last). A unit missing here, or a stale order, only costs balance, never a test."""


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With pytest-xdist (scripts/test.sh runs three workers) a worker is handed whole
    modules, so that module fixtures start once (but each test of ``SPLIT_BY_TEST`` on
    its own); the whole of each directory in ``SHARED_BY_DIRECTORY`` and the modules of
    ``SHARED_SPARK_CLUSTER``, whose session fixtures are too heavy to start in every
    worker, go to one worker each. The units in
    ``SLOWEST_FIRST`` are handed out first, in that order (longest first balances the
    workers' totals); then modules with the most tests."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedStarts(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            parts = module.split("/")
            if module in SHARED_SPARK_CLUSTER:
                return SLOWEST_FIRST[0]
            if module in SPLIT_BY_TEST:
                return nodeid
            if len(parts) > 2 and parts[1] in SHARED_BY_DIRECTORY:
                return "/".join(parts[:2])
            return module

        def _assign_work_unit(self, node: Any) -> None:
            # xdist hands out the front of its queue: put the slowest unit left there.
            rank = {scope: i for i, scope in enumerate(SLOWEST_FIRST)}
            slowest = min(self.workqueue, key=lambda scope: rank.get(scope, len(rank)))
            self.workqueue.move_to_end(slowest, last=False)
            super()._assign_work_unit(node)

    return SharedStarts(config, log)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole session; tests use their own topic names."""
    data = tmp_path_factory.mktemp("broker") / "data"
    process = BrokerProcess(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
    """A ``gregor schema-registry`` process on the session's broker, one per module."""
    process = RegistryProcess(broker.bootstrap).start()
    yield process
    process.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart, kill or reconfigure it.

    Without the group coordinator's initial rebalance delay (Kafka's 3 s), as the session's
    broker: every group a test forms would otherwise wait it out. A test of the delay sets
    ``overrides["group.initial.rebalance.delay.ms"]`` before it starts the broker."""
    process = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    yield process
    process.kill()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA and certificates (scripts/make-certs.sh, as users make theirs)."""
    directory = tmp_path_factory.mktemp("certs")
    script = Path(__file__).resolve().parent.parent / "scripts" / "make-certs.sh"
    subprocess.run([str(script), str(directory)], check=True, capture_output=True)
    return directory


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
