"""Writing a transaction's markers into partitions this broker leads.

The one place a marker is appended: the WriteTxnMarkers handler calls it for the
markers another broker's coordinator sends, and the coordinator's marker channel
for the partitions it leads itself. The append is a leader append at acks=all (it
replicates like any record), and only once every in-sync replica has the marker is
it acknowledged and, in ``__consumer_offsets``, are the transaction's offsets made
the group's (as Kafka's WriteTxnMarkers completion does). A marker from a coordinator
older than the one that wrote the producer's last marker here is refused with
TRANSACTION_COORDINATOR_FENCED, as Kafka's producer state refuses it: that
coordinator lost its partition, and its successor decides the transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gregor.cluster.replica_manager import ReplicaManager
from gregor.groups.coordinator import GroupCoordinator
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.protocol.control_record import encode_marker
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendOrigin, LogAppendError
from gregor.transactions.metadata import TopicPartition

if TYPE_CHECKING:
    from gregor.cluster.partition import Partition


async def write_markers(replica_manager: ReplicaManager, groups: GroupCoordinator,
                        tps: Sequence[TopicPartition], producer_id: int, producer_epoch: int,
                        commit: bool, coordinator_epoch: int, timeout_s: float
                        ) -> list[ErrorCode]:
    """Append the marker to each partition as its leader, then wait until every one is
    replicated: each partition's error, in ``tps`` order. One transaction's markers to
    this broker are one piece of work: the marker is encoded once (the log stamps its
    offset on a copy) and all of them wait for their followers together."""
    marker = encode_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                           int(time.time() * 1000))
    errors = [ErrorCode.none] * len(tps)
    appended: list[tuple[int, Partition, int]] = []
    for index, tp in enumerate(tps):
        partition = replica_manager.get(*tp)
        if partition is None:
            errors[index] = ErrorCode.not_leader_or_follower
            continue
        producer = partition.log.producer_state.producers.get(producer_id)
        if producer is not None and producer.coordinator_epoch > coordinator_epoch:
            errors[index] = ErrorCode.transaction_coordinator_fenced
            continue
        try:
            result = partition.append_as_leader(marker, required_acks=-1,
                                                origin=AppendOrigin.COORDINATOR)
        except LogAppendError as exc:
            errors[index] = exc.error
            continue
        replica_manager.notify(tp)
        appended.append((index, partition, result.last_offset + 1))
    if not appended:
        return errors
    waits = [(partition, required) for _, partition, required in appended]
    acked = await replica_manager.delayed_produce.wait(waits, timeout_s)
    for (index, _, _), error in zip(appended, acked, strict=True):
        errors[index] = error
        if error == ErrorCode.none and tps[index][0] == OFFSETS_TOPIC:
            groups.complete_transactional_offsets(producer_id, commit)
    return errors
