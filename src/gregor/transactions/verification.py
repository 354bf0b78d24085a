"""TransactionVerifier: a partition leader asks the transaction's coordinator on another
broker whether the transaction added the partition (KIP-890 part 1, Kafka 3.6's
transaction verification).

A transactional batch written into a partition its transaction never added would
never see a marker: the partition's last stable offset would wait for it forever (a
hanging transaction), and read_committed consumers with it. This happens when a
producer's Produce request is delayed past the end of its transaction, or a buggy
client skips AddPartitionsToTxn. Where the coordinator is this broker, the produce
path checks every batch itself (``TransactionCoordinator.verify_partition``);
elsewhere, before the first batch of a producer with no transaction open in the
partition, it sends AddPartitionsToTxn v4 with VerifyOnly to the coordinator, as
Kafka's leaders do. The batches after it belong to a transaction the partition
already holds open, which its marker will end.

Between the question and the append a marker of the producer may be written (its
transaction ended meanwhile): the verification's guard, kept with the partition's
open transactions and dropped by any transactional batch or marker of the producer,
tells the produce path not to append then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.add_partitions_to_txn.v4 import request as verify_request

from gregor.cluster.broker_channel import BrokerChannels, ChannelError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.transactions.metadata import TopicPartition
from gregor.transactions.state_log import TransactionStateLog

log = logging.getLogger(__name__)

VERIFY_VERSION = verify_request.AddPartitionsToTxnRequest.__version__
# What the producer is told for what the coordinator said, as Kafka 3.7.1's leaders
# tell it (Produce up to v10): a coordinator that cannot answer now means "try again",
# NOT_ENOUGH_REPLICAS, which every client retries; a fenced epoch is told as producers
# before KIP-588 know it.
_RETRY_LATER = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator})


def produce_error(answer: ErrorCode) -> ErrorCode:
    """The Produce error for a partition the coordinator answered ``answer`` about."""
    if answer in _RETRY_LATER:
        return ErrorCode.not_enough_replicas
    if answer == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return answer


class TransactionVerifier:
    def __init__(self, broker_id: int, state_log: TransactionStateLog,
                 address: Callable[[int], tuple[str, int] | None], timeout_s: float,
                 source_address: str | None, security: ChannelSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.state_log = state_log
        self._channels = BrokerChannels(address, timeout_s, source_address, security)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The Produce error of each partition (``none``: the batch may be appended)."""
        coordinator = self.state_log.coordinator_for(transactional_id)
        if coordinator is None or coordinator.broker_id == self.broker_id:
            # No coordinator now, or one that moved here since the produce path looked.
            return dict.fromkeys(partitions, produce_error(ErrorCode.coordinator_not_available))
        try:
            answer = await self._channels.request(
                coordinator.broker_id, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION,
                _request(transactional_id, producer_id, producer_epoch, partitions))
        except ChannelError as exc:
            log.info("verifying the transaction of %s with broker %d failed: %s",
                     transactional_id, coordinator.broker_id, exc)
            return dict.fromkeys(partitions, produce_error(ErrorCode.network_exception))
        if answer.error_code:
            return dict.fromkeys(partitions, produce_error(ErrorCode(answer.error_code)))
        # A partition the answer leaves out was not verified.
        errors = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
        for result in answer.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    tp = (topic.name, partition.partition_index)
                    if tp in errors:
                        errors[tp] = ErrorCode(partition.partition_error_code)
        return {tp: produce_error(error) for tp, error in errors.items()}

    def close(self) -> None:
        self._channels.close()


def _request(transactional_id: str, producer_id: int, producer_epoch: int,
             partitions: list[TopicPartition]) -> verify_request.AddPartitionsToTxnRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return build(verify_request.AddPartitionsToTxnRequest, transactions=(build(
        verify_request.AddPartitionsToTxnTransaction, transactional_id=transactional_id,
        producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=tuple(build(verify_request.AddPartitionsToTxnTopic, name=name,
                           partitions=tuple(indexes))
                     for name, indexes in by_topic.items())),))
