"""DescribeProducers (KIP-664): the producers a partition's log knows, as
``kafka-transactions.sh describe-producers`` and ``find-hanging`` ask for them.

Answered from the partition's producer state, on any broker holding a replica (as
Kafka does; the admin client asks the leader unless told a broker): each producer id
with its epoch, last sequence, the timestamp of its last batch or marker, the epoch
of the coordinator that wrote its last marker, and where its open transaction began
(-1 when none is open), which is what tells a hanging transaction.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import topic_allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.storage.log import Log

_KEY = ApiKey.DESCRIBE_PRODUCERS
_NO_TXN = -1


def _producers(log: Log, version: int) -> tuple:
    state_cls = nested(_KEY, version, "ProducerState")
    state = log.producer_state
    return tuple(
        build(state_cls, producer_id=pid, producer_epoch=entry.epoch,
              last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
              coordinator_epoch=entry.coordinator_epoch,
              current_txn_start_offset=state.transactions.first_offsets.get(pid, _NO_TXN))
        for pid, entry in sorted(state.producers.items()))


def _partition(broker: Broker, topic: str, index: int, version: int):
    partition_cls = nested(_KEY, version, "PartitionResponse")
    if broker.image.partition(topic, index) is None:
        return build(partition_cls, partition_index=index,
                     error_code=ErrorCode.unknown_topic_or_partition, active_producers=())
    partition = broker.replica_manager.get(topic, index)
    if partition is None:
        return build(partition_cls, partition_index=index,
                     error_code=ErrorCode.not_leader_or_follower, active_producers=())
    return build(partition_cls, partition_index=index, error_code=ErrorCode.none,
                 active_producers=_producers(partition.log, version))


async def handle(broker: Broker, request: Request):
    version = request.version
    topic_cls = nested(_KEY, version, "TopicResponse")
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 topics=tuple(
                     build(topic_cls, name=topic.name, partitions=tuple(
                         _partition(broker, topic.name, index, version)
                         if topic_allowed(broker, request, Operation.READ, topic.name) else
                         build(nested(_KEY, version, "PartitionResponse"),
                               partition_index=index,
                               error_code=ErrorCode.topic_authorization_failed,
                               active_producers=())
                         for index in topic.partition_indexes))
                     for topic in request.body.topics))
