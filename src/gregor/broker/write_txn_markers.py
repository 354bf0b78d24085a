"""WriteTxnMarkers: a transaction coordinator on another broker ends a transaction in
the partitions led here.

Each marker is appended as a leader append at acks=all (``write_marker``), and a
partition is answered once its followers have it, or with the error that stopped
it: NOT_LEADER_OR_FOLLOWER when leadership moved (the coordinator looks the leader
up again and resends), NOT_ENOUGH_REPLICAS when the ISR is short, and so on.
Only brokers send this request; it is advertised like every API served.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.transactions.markers import write_marker

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.WRITE_TXN_MARKERS


async def _write(broker: Broker, marker, topic: str, index: int) -> ErrorCode:
    meta = broker.image.topics.get(topic)
    if meta is None or not 0 <= index < len(meta.partitions):
        return ErrorCode.unknown_topic_or_partition
    return await write_marker(broker.replica_manager, broker.group_coordinator, (topic, index),
                              marker.producer_id, marker.producer_epoch,
                              marker.transaction_result, marker.coordinator_epoch,
                              broker.config["request.timeout.ms"] / 1000)


async def handle(broker: Broker, request: Request):
    version = request.version
    partition_cls = nested(_KEY, version, "WritableTxnMarkerPartitionResult")
    topic_cls = nested(_KEY, version, "WritableTxnMarkerTopicResult")
    marker_cls = nested(_KEY, version, "WritableTxnMarkerResult")
    results = []
    for marker in request.body.markers:
        asked = [(topic.name, index) for topic in marker.topics
                 for index in topic.partition_indexes]
        errors = await asyncio.gather(*(_write(broker, marker, *tp) for tp in asked))
        by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
        for (topic, index), error in zip(asked, errors, strict=True):
            by_topic.setdefault(topic, []).append((index, error))
        results.append(build(marker_cls, producer_id=marker.producer_id, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(
                build(partition_cls, partition_index=index, error_code=error)
                for index, error in answers))
            for name, answers in by_topic.items())))
    return build(response_schema(_KEY, version), markers=tuple(results))
