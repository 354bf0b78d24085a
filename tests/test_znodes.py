"""Kafka's ZooKeeper formats as gregor writes them, for the ones formatted by hand."""

from __future__ import annotations

import json

import pytest

from gregor.cluster import znodes
from gregor.cluster.partition_state import NO_LEADER, PartitionState


@pytest.mark.parametrize("state", [
    PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3)),
    PartitionState(leader=NO_LEADER, leader_epoch=17, isr=(2,), replicas=(2, 3),
                   partition_epoch=9, controller_epoch=4),
    PartitionState(leader=1002, leader_epoch=2**31 - 1, isr=(), replicas=(1002,),
                   controller_epoch=123456),
])
def test_a_partition_state_is_kafkas_json(state: PartitionState) -> None:
    encoded = znodes.encode_partition_state(state)
    assert encoded == json.dumps(
        {"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
         "leader_epoch": state.leader_epoch, "isr": list(state.isr)},
        separators=(",", ":")).encode()
    assert znodes.decode_partition_state(encoded, state.replicas, state.partition_epoch) == state


@pytest.mark.parametrize("state", [
    PartitionState(leader=2, leader_epoch=4, isr=(2, 3), replicas=(1, 2, 3), partition_epoch=7,
                   controller_epoch=3),
    PartitionState(leader=NO_LEADER, leader_epoch=1, isr=(1,), replicas=(1, 2),
                   partition_epoch=2),
])
def test_a_change_node_carries_the_same_state_fields(state: PartitionState) -> None:
    """The change node embeds a state's fields as a dict, the state znode formats them
    by hand: both must read back as the same state."""
    node = znodes.encode_state_changes([znodes.StateChange("t", "id", 5, state)])
    (decoded,) = znodes.decode_state_changes(node, lambda topic, index: state.replicas)
    assert decoded == znodes.StateChange("t", "id", 5, state)
    embedded = json.loads(node)["partitions"][0]["state"]
    assert embedded == json.loads(znodes.encode_partition_state(state))
