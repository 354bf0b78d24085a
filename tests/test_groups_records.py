"""The pure parts of the group coordinator: __consumer_offsets record formats, the
group-to-partition mapping, protocol selection and the offset retention rules."""

from __future__ import annotations

import struct

import pytest

from gregor.groups import records
from gregor.groups.group import Group, GroupState
from gregor.groups.member import Member
from gregor.groups.offset_and_metadata import OffsetAndMetadata
from gregor.groups.offsets_store import java_string_hash, partition_for

MINUTE_MS = 60_000


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_offset_commit_key_is_kafkas_layout() -> None:
    key = records.offset_commit_key("grp", "topic", 7)
    assert key == struct.pack(">h", 1) + _string("grp") + _string("topic") + struct.pack(">i", 7)
    assert records.read_key(key) == records.OffsetCommitKey("grp", "topic", 7)
    # Version 0 keys (older Kafka) read the same.
    assert records.read_key(b"\x00\x00" + key[2:]) == records.OffsetCommitKey("grp", "topic", 7)


def test_group_metadata_key_is_kafkas_layout() -> None:
    key = records.group_metadata_key("grp")
    assert key == struct.pack(">h", 2) + _string("grp")
    assert records.read_key(key) == records.GroupMetadataKey("grp")


def test_offset_commit_value_versions() -> None:
    current = OffsetAndMetadata(42, 3, "meta", 1_700_000_000_000)
    value = records.offset_commit_value(current)
    assert value == (struct.pack(">hqi", 3, 42, 3) + _string("meta")
                     + struct.pack(">q", 1_700_000_000_000))
    assert records.read_offset_commit_value(value) == current
    # An explicit expire timestamp needs v1, which has no leader epoch.
    expiring = OffsetAndMetadata(42, -1, "meta", 1000, expire_timestamp=5000)
    value = records.offset_commit_value(expiring)
    assert value[:2] == b"\x00\x01"
    assert records.read_offset_commit_value(value) == expiring


# Values as Kafka writes them, spelled out from its OffsetCommitValue.json (offset,
# leaderEpoch from v3, metadata, commitTimestamp, expireTimestamp in v1 only; v4 is
# flexible: compact string, tagged fields, topicId as tag 0), not from gregor's schema.
_OFFSET_COMMIT_VALUES = {
    0: struct.pack(">hq", 0, 9) + _string("m") + struct.pack(">q", 77),
    1: struct.pack(">hq", 1, 9) + _string("m") + struct.pack(">qq", 77, 1077),
    2: struct.pack(">hq", 2, 9) + _string("m") + struct.pack(">q", 77),
    3: struct.pack(">hqi", 3, 9, 5) + _string("m") + struct.pack(">q", 77),
    4: struct.pack(">hqi", 4, 9, 5) + b"\x02m" + struct.pack(">q", 77) + b"\x00",
    # The same with a tagged field (tag 0, 16 bytes: a topicId), which readers skip.
    5: struct.pack(">hqi", 4, 9, 5) + b"\x02m" + struct.pack(">q", 77)
    + b"\x01\x00\x10" + bytes(range(16)),
}


@pytest.mark.parametrize("layout", [*range(5), pytest.param(5, marks=pytest.mark.xfail(
    strict=True, raises=records.InvalidRecord,
    reason="flexible values with a tagged field are refused ('Unknown tagged field tag: "
           "0'), where Kafka's readers skip unknown tags"))])
def test_offset_commit_values_of_every_kafka_version_are_read(layout: int) -> None:
    read = records.read_offset_commit_value(_OFFSET_COMMIT_VALUES[layout])
    assert (read.offset, read.metadata, read.commit_timestamp) == (9, "m", 77)
    assert read.leader_epoch == (5 if layout >= 3 else -1)
    assert read.expire_timestamp == (1077 if layout == 1 else -1)


def test_group_metadata_value_is_kafkas_layout() -> None:
    """Version 3 of Kafka's GroupMetadataValue.json: protocolType, generation, protocol
    and leader (nullable), currentStateTimestamp, then per member memberId,
    groupInstanceId (nullable), clientId, clientHost, rebalanceTimeout, sessionTimeout,
    subscription and assignment (bytes)."""
    group = records.GroupRecord(
        protocol_type="consumer", generation=4, protocol="range", leader="m-1",
        current_state_timestamp=123, members=(
            records.MemberRecord("m-1", None, "client", "/127.0.0.1", 30000, 6000, b"s", b"a"),
            records.MemberRecord("m-2", "static", "c2", "/10.0.0.1", 1, 2, b"", b"")))
    null_string = struct.pack(">h", -1)
    kafka = (struct.pack(">h", 3) + _string("consumer") + struct.pack(">i", 4)
             + _string("range") + _string("m-1") + struct.pack(">qi", 123, 2)
             + _string("m-1") + null_string + _string("client") + _string("/127.0.0.1")
             + struct.pack(">iii", 30000, 6000, 1) + b"s" + struct.pack(">i", 1) + b"a"
             + _string("m-2") + _string("static") + _string("c2") + _string("/10.0.0.1")
             + struct.pack(">iiii", 1, 2, 0, 0))
    assert records.group_metadata_value(group) == kafka
    assert records.read_group_metadata_value(kafka) == group


def test_unreadable_records_raise_invalid_record() -> None:
    for garbage in (b"", b"\x00", b"\x00\x09rest", b"\x00\x01\x00\x05ab"):
        with pytest.raises(records.InvalidRecord):
            records.read_key(garbage)
    with pytest.raises(records.InvalidRecord):
        records.read_offset_commit_value(b"\x00\x03\x00")


def test_group_partition_is_kafkas() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    # The one string whose hash is Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    # Characters beyond the BMP hash as their two UTF-16 code units, as in Java.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def _member(member_id: str, *protocols: str, instance: str | None = None) -> Member:
    return Member(member_id, instance, "client", "/h", 1000, 1000, "consumer",
                  tuple((name, b"") for name in protocols))


def test_protocol_selection_is_a_vote_among_common_protocols() -> None:
    group = Group("g", 0)
    group.add(_member("a", "range", "roundrobin"))
    group.add(_member("b", "roundrobin", "range"))
    group.add(_member("c", "roundrobin", "range", "sticky"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "roundrobin"
    assert group.supports_protocols("consumer", (("range", b""),))
    assert not group.supports_protocols("consumer", (("sticky", b""),))
    assert not group.supports_protocols("connect", (("range", b""),))
    # A protocol one member lists twice is still not supported by the others.
    group.add(_member("d", "sticky", "sticky", "range"))
    assert group.candidate_protocols() == {"range"}
    assert group.select_protocol() == "range"


def _group_with_offsets(protocol_type: str | None, state: GroupState,
                        state_timestamp: int) -> Group:
    group = Group("g", state_timestamp, state)
    group.protocol_type = protocol_type
    group.offsets = {("old", 0): OffsetAndMetadata(1, -1, "", commit_timestamp=0),
                     ("new", 0): OffsetAndMetadata(1, -1, "", commit_timestamp=50 * MINUTE_MS)}
    return group


def test_offsets_of_an_empty_group_expire_together_after_it_emptied() -> None:
    group = _group_with_offsets("consumer", GroupState.EMPTY, state_timestamp=40 * MINUTE_MS)
    assert group.expired_offsets(49 * MINUTE_MS, 10 * MINUTE_MS) == []
    assert sorted(group.expired_offsets(50 * MINUTE_MS, 10 * MINUTE_MS)) == [
        ("new", 0), ("old", 0)]


def test_standalone_offsets_expire_one_by_one_after_their_commit() -> None:
    group = _group_with_offsets(None, GroupState.EMPTY, state_timestamp=0)
    assert group.expired_offsets(10 * MINUTE_MS, 10 * MINUTE_MS) == [("old", 0)]


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics() -> None:
    group = _group_with_offsets("consumer", GroupState.STABLE, state_timestamp=0)
    group.subscribed_topics = {"new"}
    assert group.expired_offsets(100 * MINUTE_MS, 10 * MINUTE_MS) == [("old", 0)]
    group.subscribed_topics = None  # subscriptions unknown: keep everything
    assert group.expired_offsets(100 * MINUTE_MS, 10 * MINUTE_MS) == []


def test_explicit_expire_timestamp_wins() -> None:
    group = Group("g", 0)
    group.protocol_type = "consumer"
    group.state = GroupState.EMPTY
    group.offsets = {("t", 0): OffsetAndMetadata(1, -1, "", 0, expire_timestamp=500)}
    assert group.expired_offsets(499, 10 * MINUTE_MS) == []
    assert group.expired_offsets(500, 10 * MINUTE_MS) == [("t", 0)]


def test_state_machine_refuses_moves_kafka_does_not_allow() -> None:
    group = Group("g", 0)
    with pytest.raises(RuntimeError):
        group.transition_to(GroupState.STABLE, 1)
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    group.transition_to(GroupState.COMPLETING_REBALANCE, 2)
    group.transition_to(GroupState.STABLE, 3)
    assert group.state_timestamp == 3
