"""read_committed: leave out the batches of aborted transactions, as Kafka's consumer does.

A read_committed Fetch answer lists the aborted transactions that overlap it as
``(producer_id, first_offset)``.  Walking the answer's batches in offset order, a
producer becomes aborted once a batch reaches its transaction's first offset, its
transactional batches are then skipped, and its abort marker (a control batch) ends
that.  The list belongs to one answer, so each answer gets a filter of its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from gregor.protocol.control_record import is_commit
from gregor.protocol.record_batch import BatchHeader


class AbortedTransactions:
    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborted: set[int] = set()

    def keeps(self, batch: memoryview, header: BatchHeader) -> bool:
        """Whether a data batch's records are committed (or not transactional); control
        batches are never kept, but an abort marker ends its producer's abort."""
        while self._pending and self._pending[0][0] <= header.last_offset:
            self._aborted.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            if header.producer_id in self._aborted and not is_commit(batch):
                self._aborted.discard(header.producer_id)
            return False
        return not (header.is_transactional and header.producer_id in self._aborted)
