"""Two registry processes on one broker: one is elected primary through a Kafka group,
the other forwards writes to it; a killed primary is replaced and ids stay unique and
increasing; a stopped one leaves the group."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clients import WireConnection
from test_groups_protocol import describe

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module's own: its group and _schemas hold these registries alone."""
    data: Path = tmp_path_factory.mktemp("registry-failover") / "data"
    process = BrokerProcess(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


def schema(n: int) -> dict:
    return {"schema": json.dumps({"type": "record", "name": f"R{n}", "fields": []})}


def primary_of(instances: list[RegistryProcess], timeout: float = 30.0) -> RegistryProcess:
    """The instance whose log says it was elected (its latest election)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for instance in instances:
            elections = [line for line in instance.output if "schema registry primary:" in line]
            if elections and "(this instance)" in elections[-1]:
                return instance
        time.sleep(0.1)
    raise AssertionError("no primary elected:\n" + "".join(
        line for instance in instances for line in instance.output))


def test_writes_at_any_instance_and_a_killed_primary(own_broker: BrokerProcess) -> None:
    instances = [RegistryProcess(own_broker.bootstrap).start() for _ in range(2)]
    try:
        # Writes sent to both at once: one writer decides every id.
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda n: instances[n % 2].call("POST", f"/subjects/s{n}/versions", schema(n)),
                range(16)))
        assert all(status == 200 for status, _ in answers), answers
        ids = [body["id"] for _, body in answers]
        assert len(set(ids)) == 16
        # Both read the same state back: at once what was written through them, the
        # rest once their reader reaches it.
        for instance in instances:
            wanted = sorted(f"s{n}" for n in range(16))
            deadline = time.monotonic() + 10
            while instance.call("GET", "/subjects")[1] != wanted:
                assert time.monotonic() < deadline, instance.call("GET", "/subjects")
                time.sleep(0.05)
        follower = next(i for i in instances if i is not primary_of(instances))
        status, written = follower.call("POST", "/subjects/forwarded/versions", schema(50))
        assert follower.call("GET", "/subjects/forwarded/versions/1")[1]["id"] == written["id"]

        primary = primary_of(instances)
        survivor = next(i for i in instances if i is not primary)
        primary.kill()
        status, body = survivor.call("POST", "/subjects/after/versions", schema(100))
        assert status == 200, body
        assert body["id"] > max(ids)
        assert primary_of([survivor]) is survivor
        # The killed instance comes back as a follower that sees everything.
        primary.start()
        assert primary.call("GET", "/subjects/after/versions")[1] == [1]
        status, body2 = primary.call("POST", "/subjects/later/versions", schema(101))
        assert status == 200 and body2["id"] > body["id"]
    finally:
        for instance in instances:
            instance.stop()


def test_a_stopped_instance_leaves_the_group(own_broker: BrokerProcess) -> None:
    """SIGTERM (what run-broker.sh, run-cluster.sh and service managers stop it with)
    lets an instance leave the group, so another is elected at once rather than after
    the session timeout, and a registry restarted at once is not held up by its old
    membership."""
    instance = RegistryProcess(own_broker.bootstrap, options=("--group-id", "leaving")).start()
    try:
        primary_of([instance])
        with WireConnection(own_broker.bootstrap) as connection:
            assert len(describe(connection, "leaving").members) == 1
            instance.stop()
            group = describe(connection, "leaving")
        assert (group.group_state, group.members) == ("Empty", ()), group
    finally:
        instance.stop()
