package io.gregor.spark.read;

import java.util.HashSet;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.function.BooleanSupplier;

/**
 * read_committed: which batches of one Fetch answer belong to aborted transactions (the port of
 * aborted_transactions.py). The answer lists the aborted transactions that overlap it as
 * (producer id, first offset). Walking its batches in offset order, a producer becomes aborted
 * once a batch reaches its transaction's first offset; its transactional batches are then left
 * out, and its abort marker ends that. The list belongs to one answer: one filter per answer.
 */
final class AbortedTransactions {
  private final PriorityQueue<long[]> pending =
      new PriorityQueue<>((a, b) -> Long.compare(a[0], b[0]));
  private final Set<Long> aborted = new HashSet<>();

  AbortedTransactions(long[] producerIds, long[] firstOffsets) {
    for (int i = 0; i < producerIds.length; i++) {
      pending.add(new long[] {firstOffsets[i], producerIds[i]});
    }
  }

  /**
   * Whether a data batch's records are committed (or not transactional). A control batch is never
   * kept, but an abort marker ends its producer's abort ({@code isCommit} reads the marker, only
   * when that matters).
   */
  boolean keeps(long lastOffset, boolean control, boolean transactional, long producerId,
      BooleanSupplier isCommit) {
    while (!pending.isEmpty() && pending.peek()[0] <= lastOffset) {
      aborted.add(pending.poll()[1]);
    }
    if (control) {
      if (aborted.contains(producerId) && !isCommit.getAsBoolean()) {
        aborted.remove(producerId);
      }
      return false;
    }
    return !(transactional && aborted.contains(producerId));
  }
}
