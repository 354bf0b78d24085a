"""WriteTxnMarkers: a transaction coordinator on another broker ends a transaction in
the partitions led here.

Each marker is appended as a leader append at acks=all (``write_markers``), and a
partition is answered once its followers have it, or with the error that stopped
it: NOT_LEADER_OR_FOLLOWER when leadership moved (the coordinator looks the leader
up again and resends), NOT_ENOUGH_REPLICAS when the ISR is short, and so on.
Only brokers send this request; it is advertised like every API served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType
from gregor.transactions.markers import write_markers

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.WRITE_TXN_MARKERS


async def _write(broker: Broker, marker, asked: list[tuple[str, int]]) -> list[ErrorCode]:
    """The marker in each partition asked (those of unknown topics refused first)."""
    errors = [ErrorCode.none] * len(asked)
    known = []
    for position, (topic, index) in enumerate(asked):
        if broker.image.partition(topic, index) is None:
            errors[position] = ErrorCode.unknown_topic_or_partition
        else:
            known.append(position)
    written = await write_markers(broker.replica_manager, broker.group_coordinator,
                                  [asked[p] for p in known], marker.producer_id,
                                  marker.producer_epoch, marker.transaction_result,
                                  marker.coordinator_epoch,
                                  broker.config["request.timeout.ms"] / 1000)
    for position, error in zip(known, written, strict=True):
        errors[position] = error
    return errors


async def handle(broker: Broker, request: Request):
    version = request.version
    partition_cls = nested(_KEY, version, "WritableTxnMarkerPartitionResult")
    topic_cls = nested(_KEY, version, "WritableTxnMarkerTopicResult")
    marker_cls = nested(_KEY, version, "WritableTxnMarkerResult")
    # Only brokers (transaction coordinators) write markers.
    may_write_markers = allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    results = []
    for marker in request.body.markers:
        asked = [(topic.name, index) for topic in marker.topics
                 for index in topic.partition_indexes]
        errors = (await _write(broker, marker, asked) if may_write_markers
                  else [ErrorCode.cluster_authorization_failed] * len(asked))
        by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
        for (topic, index), error in zip(asked, errors, strict=True):
            by_topic.setdefault(topic, []).append((index, error))
        results.append(build(marker_cls, producer_id=marker.producer_id, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(
                build(partition_cls, partition_index=index, error_code=error)
                for index, error in answers))
            for name, answers in by_topic.items())))
    return build(response_schema(_KEY, version), markers=tuple(results))
