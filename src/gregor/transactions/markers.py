"""Writing one transaction marker into a partition this broker leads.

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

from gregor.cluster.replica_manager import ReplicaManager
from gregor.groups.coordinator import GroupCoordinator
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.protocol.control_record import encode_marker
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendOrigin, LogAppendError
from gregor.transactions.metadata import TopicPartition


async def write_marker(replica_manager: ReplicaManager, groups: GroupCoordinator,
                       tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, timeout_s: float) -> ErrorCode:
    """Append the marker as the partition's leader and wait until it is replicated."""
    partition = replica_manager.get(*tp)
    if partition is None:
        return ErrorCode.not_leader_or_follower
    producer = partition.log.producer_state.producers.get(producer_id)
    if producer is not None and producer.coordinator_epoch > coordinator_epoch:
        return ErrorCode.transaction_coordinator_fenced
    marker = encode_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                           int(time.time() * 1000))
    try:
        result = partition.append_as_leader(marker, required_acks=-1,
                                            origin=AppendOrigin.COORDINATOR)
    except LogAppendError as exc:
        return exc.error
    replica_manager.notify(tp)
    error = await replica_manager.wait_for_acks(partition, result.last_offset + 1, timeout_s)
    if error == ErrorCode.none and tp[0] == OFFSETS_TOPIC:
        groups.complete_transactional_offsets(producer_id, commit)
    return error
