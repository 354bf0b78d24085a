"""The hand-written Metadata encoder says, byte for byte, what kio says, in every
version the broker serves; and a topic's encoded partitions are reused only while
they are still true."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from gregor.broker.metadata import EncodedPartitions
from gregor.broker.process import BrokerProcess
from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.partition_state import PartitionState
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, encode_response, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.protocol.metadata_response import (
    MAX_VERSION,
    BrokerEntry,
    TopicEntry,
    encode_metadata_response,
    encode_partitions,
    with_throttle,
)

_KEY = ApiKey.METADATA
LIVE = frozenset({1, 2})
STATES = [PartitionState(1, 4, (1, 2, 3), (1, 2)),
          PartitionState(3, 7, (3, 1), (3,)),  # its leader is not live
          PartitionState(2, 0, (2,), (2,))]
BROKERS = [BrokerEntry(1, "a.example", 9092, None), BrokerEntry(2, "b.example", 9093, "r2")]
TOPIC_ID = uuid.UUID("6f1f7d52-46c5-4c33-9d16-3f4d7f0b7a11")


def _kio(version: int, topics: list[tuple[int, str | None, uuid.UUID | None, bool,
                                          list[PartitionState], int]],
         cluster_id: str | None, operations: int) -> bytes:
    """The same answer through kio, as the broker built it before."""
    partition_cls = nested(_KEY, version, "MetadataResponsePartition")
    entries = []
    for error, name, topic_id, internal, states, topic_operations in topics:
        partitions = tuple(build(
            partition_cls, error_code=ErrorCode(0 if s.leader in LIVE else 5), partition_index=i,
            leader_id=s.leader if s.leader in LIVE else -1, leader_epoch=s.leader_epoch,
            replica_nodes=s.replicas, isr_nodes=s.isr,
            offline_replicas=tuple(r for r in s.replicas if r not in LIVE))
            for i, s in enumerate(states))
        entries.append(build(nested(_KEY, version, "MetadataResponseTopic"),
                             error_code=ErrorCode(error),
                             name=name, topic_id=topic_id, is_internal=internal,
                             partitions=partitions, topic_authorized_operations=topic_operations))
    brokers = tuple(build(nested(_KEY, version, "MetadataResponseBroker"), node_id=b.node_id,
                          host=b.host, port=b.port, rack=b.rack) for b in BROKERS)
    body = build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 brokers=brokers, cluster_id=cluster_id, controller_id=2,
                 topics=tuple(entries), cluster_authorized_operations=operations)
    return encode_response(_KEY, version, 77, body)


@pytest.mark.parametrize("version", range(MAX_VERSION + 1))
def test_every_version_encodes_as_kio_does(version: int) -> None:
    topics = [(0, "orders", TOPIC_ID, False, STATES, 0b1011),
              (0, "__consumer_offsets", uuid.UUID(int=5), True, STATES[:1], -(2**31)),
              (3, "missing", None, False, [], 8)]
    if version >= 12:
        topics.append((100, None, uuid.UUID(int=9), False, [], -(2**31)))  # unknown id
    cluster_id = None if version == 3 else "cluster-1"
    expected = _kio(version, topics, cluster_id, 0b101)
    ours = encode_metadata_response(
        version, 77, 0, BROKERS, cluster_id, 2,
        [TopicEntry(error, name, topic_id, internal, encode_partitions(version, states, LIVE),
                    topic_operations)
         for error, name, topic_id, internal, states, topic_operations in topics], 0b101)
    assert ours == expected


def test_a_topics_partitions_are_encoded_again_only_once_they_change() -> None:
    cache = EncodedPartitions()
    topic = TopicMetadata("t", str(TOPIC_ID), list(STATES))
    first = cache.of(topic, 12, LIVE)
    assert cache.of(topic, 12, LIVE) is first
    assert cache.of(topic, 9, LIVE) is not first  # per version
    topic.partitions[2] = PartitionState(1, 1, (2,), (2,))  # a leadership moved
    moved = cache.of(topic, 12, LIVE)
    assert moved != first and moved == encode_partitions(12, topic.partitions, LIVE)
    assert cache.of(topic, 12, frozenset({1, 2, 3})) == encode_partitions(
        12, topic.partitions, {1, 2, 3})  # broker 3 came back: partition 1 has a leader
    # Broker 1's replica of partition 0 is on a failed log directory (KIP-112).
    lost = {0: frozenset({1})}
    failed = cache.of(topic, 12, LIVE, lost)
    assert failed == encode_partitions(12, topic.partitions, LIVE, lost)
    assert failed != cache.of(topic, 12, LIVE)
    recreated = TopicMetadata("t", str(uuid.uuid4()), [STATES[0]])
    assert cache.of(recreated, 12, LIVE) == encode_partitions(12, [STATES[0]], LIVE)
    cache.forget_gone({})
    assert cache._kept == {}


def test_a_client_sees_added_partitions_through_the_kept_answer(
        broker: BrokerProcess, topic_name: str) -> None:
    """A real client asks, the topic grows, it asks again: the new partitions are in
    the next answer, not the encoded one kept from before."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    assert len(admin.list_topics(timeout=10).topics[topic_name].partitions) == 2
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30)
    partitions = admin.list_topics(timeout=10).topics[topic_name].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(p.leader == broker.broker_id for p in partitions.values())


@pytest.mark.parametrize("version", range(MAX_VERSION + 1))
def test_a_throttled_answer_carries_its_throttle_time(version: int) -> None:
    """A client over its request quota gets the same answer with throttle_time_ms set
    (v3+), as kio would encode it."""
    ours = encode_metadata_response(version, 77, 0, BROKERS, "c", 2, [], 0)
    kio_body = build(response_schema(_KEY, version),
                     throttle_time=datetime.timedelta(milliseconds=1234),
                     brokers=tuple(build(nested(_KEY, version, "MetadataResponseBroker"),
                                         node_id=b.node_id, host=b.host, port=b.port,
                                         rack=b.rack) for b in BROKERS),
                     cluster_id="c", controller_id=2, topics=(),
                     cluster_authorized_operations=0)
    assert with_throttle(ours, version, 1234) == encode_response(_KEY, version, 77, kio_body)
