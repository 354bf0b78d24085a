package io.gregor.spark.plan;

import io.gregor.spark.read.DataLoss;
import io.gregor.spark.read.ReadSettings;
import io.gregor.spark.read.TopicPartition;
import io.gregor.spark.read.TopicRange;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * The tasks of a read: one offset range per partition, cut for maxRecordsPerPartition and
 * minPartitions (partition_range.py).
 */
public final class RangePlanner {
  private RangePlanner() {}

  /**
   * Non-empty ranges for every partition of {@code end}, sorted by topic-partition. {@code start}
   * must name every partition of {@code end}. A start below the partition's log start offset
   * means records were deleted before being read: that is reported as data loss, and when
   * tolerated the range starts at the log start instead.
   */
  public static List<TopicRange> plan(
      Map<TopicPartition, Long> start,
      Map<TopicPartition, Long> end,
      Map<TopicPartition, Long> earliest,
      ReadSettings settings,
      Long minPartitions,
      Long maxRecordsPerPartition) {
    List<TopicRange> spans = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> entry : new TreeMap<>(end).entrySet()) {
      TopicPartition tp = entry.getKey();
      long first = start.get(tp);
      long last = entry.getValue();
      if (last < first) {
        throw new IllegalArgumentException(
            tp + ": ending offset " + last + " is before starting offset " + first);
      }
      long logStart = earliest.get(tp);
      if (first < logStart) {
        DataLoss.report(
            tp
                + ": expected to read from offset "
                + first
                + ", but the earliest available offset is "
                + logStart,
            settings.failOnDataLoss());
        first = logStart;
      }
      if (first < last) {
        spans.add(new TopicRange(tp.topic(), tp.partition(), first, last, settings));
      }
    }
    return split(spans, minPartitions, maxRecordsPerPartition);
  }

  /**
   * Spark's maxRecordsPerPartition and minPartitions, as its KafkaOffsetRangeCalculator: first
   * each range into ceil(size / maxRecordsPerPartition) even parts; then, while there are
   * fewer ranges than minPartitions, the large ones into parts proportional to their share of
   * the offsets that ranges too small to split leave, so that there are about minPartitions.
   */
  private static List<TopicRange> split(
      List<TopicRange> spans, Long minPartitions, Long maxRecordsPerPartition) {
    List<TopicRange> divided = spans;
    if (maxRecordsPerPartition != null) {
      divided = new ArrayList<>();
      for (TopicRange span : spans) {
        long parts = (size(span) - 1) / maxRecordsPerPartition + 1; // spans are never empty
        divided.addAll(divide(span, parts));
      }
    }
    if (minPartitions == null || divided.size() >= minPartitions) {
      return divided;
    }
    long total = 0;
    for (TopicRange span : divided) {
      total += size(span);
    }
    Set<TopicPartition> unsplit = new HashSet<>();
    long unsplitTotal = 0;
    int unsplitCount = 0;
    for (TopicRange span : divided) {
      if (partCount(size(span), total, minPartitions) == 1) {
        unsplit.add(new TopicPartition(span.topic(), span.partition()));
        unsplitTotal += size(span);
        unsplitCount++;
      }
    }
    long splitMinPartitions = Math.max(minPartitions - unsplitCount, 1);
    List<TopicRange> split = new ArrayList<>();
    for (TopicRange span : divided) {
      boolean small = unsplit.contains(new TopicPartition(span.topic(), span.partition()));
      long parts = small ? 1 : partCount(size(span), total - unsplitTotal, splitMinPartitions);
      split.addAll(divide(span, parts));
    }
    return split;
  }

  /** Spark's share of minParts for a range: at least 1, rounded half up (Scala's math.round). */
  private static long partCount(long size, long total, long minParts) {
    return Math.max(Math.round((double) size / total * minParts), 1);
  }

  /** {@code parts} ranges as even as integers allow, the remainder going to the last ones. */
  private static List<TopicRange> divide(TopicRange span, long parts) {
    List<TopicRange> pieces = new ArrayList<>();
    long remaining = size(span);
    long low = span.start();
    for (long part = 0; part < parts; part++) {
      long piece = remaining / (parts - part);
      remaining -= piece;
      if (piece > 0) {
        pieces.add(
            new TopicRange(span.topic(), span.partition(), low, low + piece, span.settings()));
      }
      low += piece;
    }
    return pieces;
  }

  private static long size(TopicRange span) {
    return span.end() - span.start();
  }
}
