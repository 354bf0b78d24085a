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

SHARED_BY_DIRECTORY = ("spark", "console")
"""Directories whose tests share things started once per process: Spark's JVM and the
standalone cluster; the console, its broker and the browser."""


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With pytest-xdist (scripts/test.sh runs two workers) a worker is handed whole
    modules, so that module fixtures start once, and the whole of each directory in
    ``SHARED_BY_DIRECTORY``, whose session fixtures are too heavy to start in both
    workers. Modules with the most tests are handed out first."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedStarts(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            parts = module.split("/")
            if len(parts) > 2 and parts[1] in SHARED_BY_DIRECTORY:
                return "/".join(parts[:2])
            return module

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
    """A broker of the test's own, for tests that restart, kill or reconfigure it."""
    process = BrokerProcess(tmp_path / "data")
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
