"""Metadata: brokers, controller and topic/partition leadership; auto-creates topics."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from gregor.broker.authorization import may_create_topic, topic_allowed
from gregor.broker.request import RawResponse, Request
from gregor.cluster.controller import ControllerError
from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.topic_names import invalid_topic_reason
from gregor.groups.offsets_store import OFFSETS_TOPIC, StoreError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.protocol.metadata_response import (
    BrokerEntry,
    TopicEntry,
    encode_metadata_response,
    encode_partitions,
)
from gregor.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_KEY = ApiKey.METADATA
_UNKNOWN_OPERATIONS = -(2**31)
# Without an authorizer Kafka allows every operation a resource supports, and says so
# when asked (bit i set for ACL operation code i): READ 3, WRITE 4, CREATE 5, DELETE 6,
# ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
# IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))


_TOPIC_ACL_OPERATIONS = tuple(Operation(code) for code in (3, 4, 5, 6, 7, 8, 10, 11))
_CLUSTER_ACL_OPERATIONS = tuple(Operation(code) for code in (5, 7, 8, 9, 10, 11, 12))


def authorized_operations(requested: bool, operations: int) -> int:
    """The authorized-operations field: the allowed set if the client asked, else unknown."""
    return operations if requested else _UNKNOWN_OPERATIONS


def broker_entries(broker: Broker, cls: type, listener: str) -> tuple:
    """Every live broker, as registered (in a cluster: in ZooKeeper), at its address on
    the listener the client came in on; as in Kafka, a broker without that listener is
    left out."""
    return tuple(build(cls, node_id=b.node_id, broker_id=b.node_id, host=b.host, port=b.port,
                       rack=b.rack) for b in _brokers(broker, listener))


def _brokers(broker: Broker, listener: str) -> list[BrokerEntry]:
    entries = []
    for _, registration in sorted(broker.image.brokers.items()):
        endpoint = registration.endpoint(listener)
        if endpoint is not None:
            entries.append(BrokerEntry(registration.broker_id, endpoint[0], endpoint[1],
                                       registration.rack))
    return entries


class EncodedPartitions:
    """Each topic's encoded partition array per version, kept while the topic's states
    and the live brokers are those it was encoded from: a topic of thousands of
    partitions is encoded once per change, not once per client request. Each broker
    keeps its own (``Broker.encoded_partitions``)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], tuple[TopicMetadata, tuple, frozenset[int],
                                                object, bytes]] = {}

    def of(self, topic: TopicMetadata, version: int, live: frozenset[int],
           lost: dict[int, frozenset[int]] | None = None) -> bytes:
        """``lost``: the topic's replicas on failed log directories, by partition."""
        key = (topic.name, version)
        states = tuple(topic.partitions)
        kept = self._kept.get(key)
        # States are immutable and replaced on change: comparing the tuples is mostly
        # comparing identities.
        if (kept is not None and kept[0] is topic and kept[2] == live and kept[3] == lost
                and kept[1] == states):
            return kept[4]
        encoded = encode_partitions(version, states, live, lost)
        self._kept[key] = (topic, states, live, lost, encoded)
        return encoded

    def forget_gone(self, topics: dict[str, TopicMetadata]) -> None:
        """Drop what deleted (or recreated) topics left."""
        for key, kept in list(self._kept.items()):
            if topics.get(key[0]) is not kept[0]:
                del self._kept[key]



def _topic_entry(encoded: EncodedPartitions, version: int, topic: TopicMetadata,
                 live: frozenset[int], lost: dict[str, dict[int, frozenset[int]]],
                 operations: int) -> TopicEntry:
    return TopicEntry(ErrorCode.none, topic.name, topic.uuid, topic.internal,
                      encoded.of(topic, version, live, lost.get(topic.name)),
                      operations)


def _error_entry(version: int, name: str | None, error: ErrorCode,
                 topic_id: uuid.UUID | None = None,
                 operations: int = _UNKNOWN_OPERATIONS) -> TopicEntry:
    """A topic that cannot be described. Asked by name, it still gets the operations
    asked for, as Kafka sets them on every named entry (clients decode them: kafka-python
    2.3 fails on the "omitted" value's bit 31); asked by an unknown id, they stay omitted."""
    return TopicEntry(error, name, topic_id, False, encode_partitions(version, (), ()),
                      operations)


def _requested_topics(broker: Broker, request: Request
                      ) -> list[tuple[str | None, uuid.UUID | None]] | None:
    """Requested ``(name, topic id)`` pairs, names resolved from ids (v10+), or None for
    "all topics" (null in v1+, empty in v0)."""
    topics = request.body.topics
    if topics is None or (request.version == 0 and not topics):
        return None
    by_id = {t.uuid: t.name for t in broker.image.topics.values()}
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    for topic in topics:
        name, topic_id = topic.name, getattr(topic, "topic_id", None)
        if name is None and topic_id is not None:
            name = by_id.get(topic_id)
        wanted.append((name, topic_id))
    return wanted


async def handle(broker: Broker, request: Request):
    version = request.version
    wanted = _requested_topics(broker, request)
    body = request.body
    want_operations = getattr(body, "include_topic_authorized_operations", False)
    topic_operations = authorized_operations(want_operations, TOPIC_OPERATIONS)
    allow_auto_create = getattr(body, "allow_auto_topic_creation", True) and (
        broker.config["auto.create.topics.enable"])
    authorizer = broker.authorizer

    def operations(name: str) -> int:
        """The operations the client may do on the topic (all, without an authorizer)."""
        if authorizer is None or not want_operations:
            return topic_operations
        return authorizer.authorized_operations(
            str(request.session.principal), request.client_host, ResourceType.TOPIC, name,
            _TOPIC_ACL_OPERATIONS)

    entries = []
    live = frozenset(broker.image.brokers)
    # Replicas on failed log directories of live brokers (KIP-112).
    lost = broker.image.offline_replicas
    if wanted is None:
        # As in Kafka, topics the client may not describe are left out.
        entries = [_topic_entry(broker.encoded_partitions, version, t, live, lost,
                                operations(t.name))
                   for t in broker.image.topics.values()
                   if topic_allowed(broker, request, Operation.DESCRIBE, t.name)]
        broker.encoded_partitions.forget_gone(broker.image.topics)
    else:
        for name, topic_id in wanted:
            if name is None:
                # Asked by id (v10+) for a topic that does not exist (any more).
                entries.append(_error_entry(version, None, ErrorCode.unknown_topic_id, topic_id))
                continue
            if not topic_allowed(broker, request, Operation.DESCRIBE, name):
                entries.append(_error_entry(version, name, ErrorCode.topic_authorization_failed,
                                            operations=operations(name)))
                continue
            topic = broker.image.topics.get(name)
            if topic is None and allow_auto_create:
                if not may_create_topic(broker, request, name):
                    entries.append(_error_entry(version, name,
                                                ErrorCode.topic_authorization_failed,
                                                operations=operations(name)))
                    continue
                topic = await _auto_create(broker, name)
            if topic is not None:
                entries.append(_topic_entry(broker.encoded_partitions, version, topic, live,
                                            lost, operations(name)))
            elif invalid_topic_reason(name):
                entries.append(_error_entry(version, name, ErrorCode.invalid_topic_exception,
                                            operations=operations(name)))
            else:
                entries.append(_error_entry(version, name, ErrorCode.unknown_topic_or_partition,
                                            operations=operations(name)))
    want_cluster = getattr(body, "include_cluster_authorized_operations", False)
    return RawResponse([encode_metadata_response(
        version, request.header.correlation_id, 0, _brokers(broker, request.session.listener),
        broker.image.cluster_id, broker.image.controller_id, entries,
        cluster_operations(broker, request, want_cluster))])


def cluster_operations(broker: Broker, request: Request, wanted: bool) -> int:
    """The cluster's authorized-operations field (Metadata, DescribeCluster)."""
    authorizer = broker.authorizer
    if authorizer is None or not wanted:
        return authorized_operations(wanted, CLUSTER_OPERATIONS)
    return authorizer.authorized_operations(
        str(request.session.principal), request.client_host, ResourceType.CLUSTER,
        CLUSTER_NAME, _CLUSTER_ACL_OPERATIONS)


async def _auto_create(broker: Broker, name: str) -> TopicMetadata | None:
    if invalid_topic_reason(name):
        return None
    if name == OFFSETS_TOPIC:
        # Asked for before any group used it (tools do): as in Kafka it is created with
        # its own settings -- internal, compacted, offsets.topic.num.partitions -- since
        # the group coordinator would otherwise inherit a client's defaults for good.
        try:
            await broker.group_coordinator.store.ensure_topic()
        except StoreError as exc:
            log.info("auto-creating topic %r failed: %s", name, exc)
        return broker.image.topics.get(name)
    try:
        return await broker.controller.create_topic(name)
    except ControllerError as exc:
        log.info("auto-creating topic %r failed: %s", name, exc)
        return None
