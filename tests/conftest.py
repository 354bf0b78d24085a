"""Shared fixtures: a real broker process, and helpers to talk to it with real clients."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.broker.process import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the whole session; tests use their own topic names."""
    data = tmp_path_factory.mktemp("broker") / "data"
    process = BrokerProcess(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart, kill or reconfigure it."""
    process = BrokerProcess(tmp_path / "data")
    yield process
    process.kill()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
