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

    def begin(self, producer_id: int, offset: int) -> None:
        """A transactional batch at ``offset``: it opens the producer's transaction unless
        one is open already."""
        self.first_offsets.setdefault(producer_id, offset)

    def complete(self, producer_id: int, marker_offset: int) -> AbortedTxn | None:
        """A marker at ``marker_offset`` ends the producer's transaction. Returns the
        entry the aborted-transaction index would need (whatever the marker's type),
        None when the producer had nothing open (a marker written twice, or for a
        partition where the transaction wrote nothing)."""
        first = self.first_offsets.pop(producer_id, None)
        if first is None:
            return None
        lso = self.first_unstable_offset
        return AbortedTxn(producer_id, first, marker_offset,
                          marker_offset + 1 if lso is None else lso)

    @property
    def first_unstable_offset(self) -> int | None:
        return min(self.first_offsets.values(), default=None)
