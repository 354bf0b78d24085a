"""Cluster tests share one real ZooKeeper; each test's cluster lives in its own chroot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cluster
from network import loopback_block

from gregor.cluster.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper for the session, on a loopback address of its own so that a test
    can cut brokers off from it (and nothing else uses that address). Writes are not
    fsynced: its data does not outlive the session."""
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), host=f"{loopback_block()}.1",
                         force_sync=False) as server:
        yield server


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers of the test's own, started and registered; killed after."""
    started = Cluster(zookeeper, tmp_path).start()
    yield started
    started.stop()
