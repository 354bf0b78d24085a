"""OngoingTransactions: the partition's open transactions and its first unstable offset.

Records of a transaction stay invisible to read_committed consumers until its
marker is written, and so do all records after its first one: the partition's
last stable offset (LSO) is the first offset of its oldest open transaction, or
the high watermark when none is open. This class keeps, per producer id, where
the open transaction began; it is fed batch headers only (the transactional bit
and producer id), never records.
"""

from __future__ import annotations

from gregor.storage.transaction_index import AbortedTxn


class OngoingTransactions:
    def __init__(self) -> None:
        self.first_offsets: dict[int, int] = {}
        # KIP-890's verification guards, by producer id: a leader that asks the
        # transaction coordinator whether a producer's transaction added this partition
        # appends the producer's batch afterwards only if no transactional batch or
        # marker of that producer was written meanwhile (a marker in between would end
        # the transaction the answer was about).
        self._guards: dict[int, object] = {}

    def begin(self, producer_id: int, offset: int) -> None:
        """A transactional batch at ``offset``: it opens the producer's transaction unless
        one is open already."""
        self.first_offsets.setdefault(producer_id, offset)
        self._guards.pop(producer_id, None)

    def guard(self, producer_id: int) -> object:
        """The guard of a verification about to be asked for (the pending one's, if any)."""
        return self._guards.setdefault(producer_id, object())

    def guarded(self, producer_id: int, guard: object) -> bool:
        """Whether the producer's batch may be appended on the strength of a verification
        begun with ``guard``: its transaction is open here, or nothing of it was written
        since."""
        return producer_id in self.first_offsets or self._guards.get(producer_id) is guard

    def drop_guard(self, producer_id: int, guard: object) -> None:
        """A verification that failed: its guard is of no further use."""
        if self._guards.get(producer_id) is guard:
            del self._guards[producer_id]

    def complete(self, producer_id: int, marker_offset: int) -> AbortedTxn | None:
        """A marker at ``marker_offset`` ends the producer's transaction. Returns the
        entry the aborted-transaction index would need (whatever the marker's type),
        None when the producer had nothing open (a marker written twice, or for a
        partition where the transaction wrote nothing)."""
        self._guards.pop(producer_id, None)
        first = self.first_offsets.pop(producer_id, None)
        if first is None:
            return None
        lso = self.first_unstable_offset
        return AbortedTxn(producer_id, first, marker_offset,
                          marker_offset + 1 if lso is None else lso)

    @property
    def first_unstable_offset(self) -> int | None:
        return min(self.first_offsets.values(), default=None)
