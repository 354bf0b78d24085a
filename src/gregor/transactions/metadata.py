"""TransactionMetadata: what the coordinator knows of one transactional id.

States and their numbers are Kafka's (they are stored in ``__transaction_state``):
a transaction is Ongoing once a partition is added, Prepare{Commit,Abort} once the
producer ends it (written before any marker, so a restart finishes the job), and
Complete{Commit,Abort} once every marker is written.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
NO_START = -1


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """Kafka's name of the state, as DescribeTransactions and ListTransactions say it."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = NO_START
    last_update_ms: int = NO_START
