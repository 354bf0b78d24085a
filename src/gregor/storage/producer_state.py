"""ProducerStateManager: per-partition idempotent-producer bookkeeping.

For every producer id the partition remembers its epoch and the last five
batches' sequence ranges and offsets (the most a producer may have in flight),
which is what is needed to drop a retried batch as a duplicate and reject a gap.
The state is snapshotted to ``<offset>.snapshot`` files so a restart only has to
replay batch headers written after the newest snapshot; a snapshot also names
where each producer's open transaction began, which no later header repeats.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import NO_PRODUCER_EPOCH, BatchHeader
from gregor.storage.checkpoint_file import fsync_file, write_atomically
from gregor.storage.ongoing_transactions import OngoingTransactions

SNAPSHOT_SUFFIX = ".snapshot"
MAX_CACHED_BATCHES = 5
_MAX_SEQUENCE = 0x7FFFFFFF


class ProducerStateError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerStateEntry:
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    # The epoch of the transaction coordinator that wrote the producer's last marker,
    # and the max timestamp of its last batch or marker (DescribeProducers shows both).
    coordinator_epoch: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return batch
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (sequences wrap at 2**31 - 1)."""
    return next_seq == last_seq + 1 or (last_seq == _MAX_SEQUENCE and next_seq == 0)


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.transactions = OngoingTransactions()

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a batch against the producer's state before it is appended.

        Returns the earlier batch's metadata when this one is a retry of it (the
        caller answers with the original offsets and writes nothing); raises
        :class:`ProducerStateError` for a fenced epoch or a sequence gap.
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer (new, or its state was removed with old segments):
            # Kafka accepts any sequence here.
            return None
        if header.producer_epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.invalid_producer_epoch,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older "
                f"than {entry.epoch}")
        if header.is_control or header.base_sequence < 0:
            # A transaction marker, or offsets the group coordinator writes for a
            # transaction (TxnOffsetCommit), carry no sequence: only the epoch counts.
            return None
        if header.producer_epoch == entry.epoch:
            duplicate = entry.find_duplicate(header)
            if duplicate is not None:
                return duplicate
            if entry.batches and not in_sequence(entry.last_seq, header.base_sequence):
                raise ProducerStateError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {header.producer_id} sent sequence {header.base_sequence} "
                    f"after {entry.last_seq}")
        elif header.base_sequence != 0:
            raise ProducerStateError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {header.producer_id} starts epoch {header.producer_epoch} "
                f"at sequence {header.base_sequence}, not 0")
        return None

    def update(self, header: BatchHeader, first_offset: int, last_offset: int,
               coordinator_epoch: int | None = None) -> None:
        """Record a batch that has been appended (or replayed from the log);
        ``coordinator_epoch``: a marker's."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerStateEntry(epoch=header.producer_epoch, coordinator_epoch=(
                -1 if entry is None else entry.coordinator_epoch))
            self.producers[header.producer_id] = entry
        entry.last_timestamp = header.max_timestamp
        if coordinator_epoch is not None:
            entry.coordinator_epoch = coordinator_epoch
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                               first_offset, last_offset, header.max_timestamp))

    def last_sequence(self, producer_id: int) -> tuple[int, int] | None:
        entry = self.producers.get(producer_id)
        return None if entry is None else (entry.epoch, entry.last_seq)

    # -------------------------------------------------------------- snapshots
    def snapshot_offsets(self) -> list[int]:
        return sorted(int(p.name[: -len(SNAPSHOT_SUFFIX)])
                      for p in self.directory.glob("*" + SNAPSHOT_SUFFIX))

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self, offset: int, keep: int = 2, durable: bool = True) -> None:
        """Persist the state as of ``offset`` (the log end offset) atomically;
        ``durable=False`` leaves its fsync to ``fsync_snapshot`` (a roll's background
        flush, as Kafka's ``takeSnapshot(sync = false)``)."""
        payload: dict[str, dict] = {
            str(pid): {"epoch": entry.epoch,
                       "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                                    b.timestamp] for b in entry.batches],
                       "coordinator_epoch": entry.coordinator_epoch,
                       "last_timestamp": entry.last_timestamp}
            for pid, entry in self.producers.items()
        }
        for pid, first in self.transactions.first_offsets.items():
            payload[str(pid)]["txn_first_offset"] = first
        write_atomically(self._snapshot_path(offset), json.dumps(payload), durable=durable)
        for old in self.snapshot_offsets()[:-keep]:
            self._snapshot_path(old).unlink(missing_ok=True)

    def fsync_snapshot(self, offset: int) -> None:
        """Put the snapshot taken at ``offset`` on disk, from any thread; one deleted
        since (by later rolls or a truncation) needs nothing. Until then a machine crash
        may lose it, and recovery starts from an older one, as when none was taken."""
        with contextlib.suppress(FileNotFoundError):
            fsync_file(self._snapshot_path(offset))

    def load_snapshot(self, log_end_offset: int) -> int:
        """Load the newest snapshot at or below ``log_end_offset``; return its offset (0 if none).

        Snapshots above the log end (left by a truncation or a torn tail) are deleted.
        """
        self.producers = {}
        self.transactions = OngoingTransactions()
        for offset in reversed(self.snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                self.producers, self.transactions.first_offsets = _parse_snapshot(
                    path.read_text())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                # Written atomically, so only outside damage gets here: fall back to an
                # older snapshot, or to replaying the whole log.
                path.unlink(missing_ok=True)
                continue
            return offset
        return 0

    def truncate_snapshots_after(self, offset: int) -> None:
        """Delete snapshots beyond ``offset`` (the log was truncated there)."""
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                self._snapshot_path(snapshot).unlink(missing_ok=True)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch or marker is older than ``expiration_ms``
        (producer.id.expiration.ms), so that idle producer ids do not pile up; how many.

        Like Kafka, age is measured by the max timestamp of the producer's last batch or
        marker, and a producer with an open transaction is kept. A marker counts: a
        producer fenced or timed out has only the abort written at its bumped epoch,
        which the partition must remember (its epoch refuses the old producer's
        batches, its coordinator epoch stale markers). A forgotten producer that writes
        again is accepted at any sequence, as a new one.
        """
        gone = [pid for pid, entry in self.producers.items()
                if pid not in self.transactions.first_offsets
                and now_ms - entry.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def remove_before(self, offset: int) -> None:
        """Forget producers whose last batch lies wholly before ``offset`` (log start moved)."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.batches and entry.batches[-1].last_offset < offset
                and pid not in self.transactions.first_offsets]
        for pid in gone:
            del self.producers[pid]


def _parse_snapshot(text: str) -> tuple[dict[int, ProducerStateEntry], dict[int, int]]:
    """The producers of a snapshot, and the first offsets of their open transactions."""
    producers = {}
    transactions = {}
    for pid, raw in json.loads(text).items():
        # Snapshots written before these were kept lack them: the last batch's time
        # stands in for the last timestamp.
        entry = ProducerStateEntry(epoch=int(raw["epoch"]),
                                   coordinator_epoch=int(raw.get("coordinator_epoch", -1)))
        entry.batches.extend(BatchMetadata(*(int(x) for x in b)) for b in raw["batches"])
        entry.last_timestamp = int(raw.get(
            "last_timestamp", entry.batches[-1].timestamp if entry.batches else -1))
        producers[int(pid)] = entry
        if "txn_first_offset" in raw:
            transactions[int(pid)] = int(raw["txn_first_offset"])
    return producers, transactions
