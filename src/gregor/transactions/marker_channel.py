"""TransactionMarkerChannel: the coordinator's markers, sent to each partition's leader.

Kafka's TransactionMarkerChannelManager: a transaction's partitions are grouped by
their current leader (from this broker's metadata), each group goes to its leader
in one WriteTxnMarkers request (or is written here when this broker leads it), and
what fails with a retriable error -- the leader moved, the ISR is short, the
leader is unreachable -- is looked up again and resent until every marker is
acknowledged. Only then may the coordinator record the transaction complete.

Sending stops when the coordinator is no longer the coordinator at the epoch the
markers carry (``still_coordinator``): the transaction's new coordinator loads it
in its Prepare state and sends the markers again. A partition whose topic is gone
is dropped, as Kafka drops it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from kio.schema.write_txn_markers.v1 import request as markers_request

from gregor.cluster.broker_channel import BrokerChannels, ChannelError
from gregor.cluster.metadata_image import MetadataImage
from gregor.cluster.partition_state import NO_LEADER
from gregor.cluster.replica_manager import ReplicaManager
from gregor.groups.coordinator import GroupCoordinator
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.transactions.markers import write_markers
from gregor.transactions.metadata import TopicPartition

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = markers_request.WriteTxnMarkersRequest.__version__
# Kafka's TransactionMarkerRequestCompletionHandler retries these; anything else is
# an answer to give up on.
RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error})
# The partition has seen a newer producer epoch or coordinator: this coordinator is a
# zombie, and its markers must not be written.
FENCED = frozenset({ErrorCode.invalid_producer_epoch,
                    ErrorCode.transaction_coordinator_fenced})


class CoordinatorFenced(Exception):
    """This broker stopped coordinating the transaction while its markers were sent."""


class TransactionMarkerChannel:
    def __init__(self, broker_id: int, image: Callable[[], MetadataImage],
                 replica_manager: ReplicaManager, groups: GroupCoordinator,
                 broker_address: Callable[[int], tuple[str, int] | None],
                 timeout_s: float, backoff_s: float, source_address: str | None,
                 security: ChannelSecurity | None = None) -> None:
        self.broker_id = broker_id
        self._image = image
        self.replica_manager = replica_manager
        self.groups = groups
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        # A margin over the leader's own wait, so that it answers rather than we give up
        # on it.
        self._channels = BrokerChannels(broker_address, timeout_s + 5.0, source_address,
                                        security)

    async def write(self, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: Iterable[TopicPartition],
                    still_coordinator: Callable[[], bool]) -> None:
        """Every partition's marker written and acknowledged by its leader; raises
        CoordinatorFenced if this broker stops coordinating first."""
        pending = set(partitions)
        while True:
            if not still_coordinator():
                raise CoordinatorFenced(f"producer {producer_id}: no longer the coordinator "
                                        f"at epoch {coordinator_epoch}")
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                leader = self._leader(tp)
                if leader is None:
                    log.warning("producer %d: %s-%d is gone; its marker is dropped",
                                producer_id, *tp)
                    pending.discard(tp)
                elif leader != NO_LEADER:
                    by_leader.setdefault(leader, []).append(tp)
            sends = [self._send(leader, tps, producer_id, producer_epoch, commit,
                                coordinator_epoch) for leader, tps in by_leader.items()]
            # One leader (always, on one broker): no task per send.
            answers = [await sends[0]] if len(sends) == 1 else await asyncio.gather(*sends)
            for errors in answers:
                for tp, error in errors.items():
                    if error == ErrorCode.none:
                        pending.discard(tp)
                    elif error in FENCED:
                        raise CoordinatorFenced(f"producer {producer_id}: {tp[0]}-{tp[1]} "
                                                f"answered {error.name}")
                    elif error not in RETRIABLE:
                        # Kafka stops with an illegal state here; the transaction cannot
                        # complete in that partition, and waiting would block it forever.
                        log.error("producer %d: marker refused by %s-%d with %s; dropped",
                                  producer_id, *tp, error.name)
                        pending.discard(tp)
            if not pending:
                return
            log.info("producer %d: markers of %s not written yet; retrying", producer_id,
                     sorted(pending))
            await asyncio.sleep(self.backoff_s)

    def _leader(self, tp: TopicPartition) -> int | None:
        """The partition's leader as this broker knows it (NO_LEADER: none now), or None
        if the partition does not exist any more."""
        state = self._image().partition(*tp)
        return None if state is None else state.leader

    async def _send(self, leader: int, tps: list[TopicPartition], producer_id: int,
                    producer_epoch: int, commit: bool, coordinator_epoch: int
                    ) -> dict[TopicPartition, ErrorCode]:
        if leader == self.broker_id:
            written = await write_markers(self.replica_manager, self.groups, tps, producer_id,
                                          producer_epoch, commit, coordinator_epoch,
                                          self.timeout_s)
            return dict(zip(tps, written, strict=True))
        request = _request(tps, producer_id, producer_epoch, commit, coordinator_epoch)
        try:
            answer = await self._channels.request(leader, ApiKey.WRITE_TXN_MARKERS,
                                                  WRITE_TXN_MARKERS_VERSION, request)
        except ChannelError as exc:
            log.info("producer %d: markers to broker %d failed: %s", producer_id, leader, exc)
            return dict.fromkeys(tps, ErrorCode.request_timed_out)
        errors = dict.fromkeys(tps, ErrorCode.unknown_server_error)
        for marker in answer.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    errors[(topic.name, partition.partition_index)] = ErrorCode(
                        partition.error_code)
        return errors

    def close(self) -> None:
        self._channels.close()


def _request(tps: list[TopicPartition], producer_id: int, producer_epoch: int, commit: bool,
             coordinator_epoch: int) -> markers_request.WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in tps:
        by_topic.setdefault(topic, []).append(index)
    return build(markers_request.WriteTxnMarkersRequest, markers=(build(
        markers_request.WritableTxnMarker, producer_id=producer_id,
        producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=tuple(build(markers_request.WritableTxnMarkerTopic, name=name,
                           partition_indexes=tuple(indexes))
                     for name, indexes in by_topic.items())),))
