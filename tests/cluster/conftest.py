"""Cluster tests share one real ZooKeeper; each test's cluster lives in its own chroot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.cluster.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(Path(tmp_path_factory.mktemp("zookeeper"))) as server:
        yield server
