"""How a group becomes ``__consumer_offsets`` records, and how a partition's records
become groups again when the broker starts."""

from __future__ import annotations

import asyncio
import logging

from gregor.groups import records
from gregor.groups.group import Group, GroupState, TopicPartition
from gregor.groups.member import Member
from gregor.groups.offset_and_metadata import OffsetAndMetadata
from gregor.groups.offsets_store import OFFSETS_TOPIC, OffsetsStore
from gregor.protocol import control_record

log = logging.getLogger(__name__)

# Records between yields to the event loop, so loading never stalls other clients.
_YIELD_EVERY = 1000


def group_metadata_record(group: Group) -> tuple[bytes, bytes]:
    """The group's generation, protocol, leader and members with their assignments."""
    protocol = group.protocol_name
    members = tuple(records.MemberRecord(
        member_id=m.member_id, group_instance_id=m.group_instance_id,
        client_id=m.client_id, client_host=m.client_host,
        rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
        subscription=m.metadata(protocol) if protocol else b"",
        assignment=m.assignment) for m in group.members.values())
    value = records.group_metadata_value(records.GroupRecord(
        protocol_type=group.protocol_type or "", generation=group.generation_id,
        protocol=protocol, leader=group.leader_id,
        current_state_timestamp=group.state_timestamp, members=members))
    return records.group_metadata_key(group.group_id), value


# Offsets by group, then partition; and those of open transactions by producer id.
GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]
PendingOffsets = dict[int, GroupOffsets]


async def load_groups(store: OffsetsStore, index: int, now_ms: int
                      ) -> tuple[list[Group], PendingOffsets]:
    """Replay one partition: the last record per key wins, and a tombstone deletes.

    Offsets a transaction wrote (TxnOffsetCommit) count from its commit marker on,
    are dropped at its abort marker, and are returned apart while it is open.
    """
    offsets: GroupOffsets = {}
    pending: PendingOffsets = {}
    stored: dict[str, records.GroupRecord | None] = {}
    count = 0
    for header, batch in store.read(index):
        if header.is_control:
            ended = pending.pop(header.producer_id, {})
            if batch and batch[0].key is not None and control_record.is_commit_key(
                    batch[0].key):
                for group_id, committed in ended.items():
                    offsets.setdefault(group_id, {}).update(committed)
            continue
        for record in batch:
            count += 1
            if count % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if record.key is None:
                continue
            try:
                key = records.read_key(record.key)
                if isinstance(key, records.OffsetCommitKey):
                    committed = offsets.setdefault(key.group, {})
                    if header.is_transactional:
                        committed = pending.setdefault(header.producer_id, {}).setdefault(
                            key.group, {})
                    if record.value is None:
                        committed.pop((key.topic, key.partition), None)
                    else:
                        committed[(key.topic, key.partition)] = (
                            records.read_offset_commit_value(record.value))
                else:
                    stored[key.group] = (None if record.value is None
                                         else records.read_group_metadata_value(record.value))
            except records.InvalidRecord as exc:
                log.warning("%s-%d offset %d: skipping record: %s", OFFSETS_TOPIC, index,
                            record.offset, exc)
    groups = []
    for group_id in stored.keys() | offsets.keys():
        committed = offsets.get(group_id, {})
        group_record = stored.get(group_id)
        if group_record is not None or committed:
            groups.append(_restore(group_id, group_record, committed, now_ms))
    return groups, pending


def _restore(group_id: str, record: records.GroupRecord | None,
             offsets: dict[TopicPartition, OffsetAndMetadata], now_ms: int) -> Group:
    """A group as it was stored: Empty, or Stable with the members it had."""
    group = Group(group_id, now_ms)
    group.offsets = offsets
    if record is None:
        return group
    group.protocol_type = record.protocol_type or None
    group.generation_id = record.generation
    if record.current_state_timestamp >= 0:
        group.state_timestamp = record.current_state_timestamp
    if record.protocol is None or not record.members:
        return group
    group.protocol_name = record.protocol
    for stored in record.members:
        group.add(Member(
            member_id=stored.member_id, group_instance_id=stored.group_instance_id,
            client_id=stored.client_id, client_host=stored.client_host,
            rebalance_timeout_ms=stored.rebalance_timeout,
            session_timeout_ms=stored.session_timeout, protocol_type=record.protocol_type,
            protocols=((record.protocol, stored.subscription),),
            assignment=stored.assignment, is_new=False))
    if record.leader in group.members:
        group.leader_id = record.leader
    group.state = GroupState.STABLE
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
