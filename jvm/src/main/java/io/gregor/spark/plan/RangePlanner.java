package io.gregor.spark.plan;

import io.gregor.spark.read.DataLoss;
import io.gregor.spark.read.ReadSettings;
import io.gregor.spark.read.TopicPartition;
import io.gregor.spark.read.TopicRange;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** The tasks of a read: one offset range per partition, cut for minPartitions (partition_range.py). */
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
      Long minPartitions) {
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
    return splitForParallelism(spans, minPartitions);
  }

  /**
   * Spark's minPartitions: cut large ranges so that there are about that many tasks, each range
   * into parts proportional to its share of all offsets (rounded half to even, as Python's
   * round, so both paths of the source plan the same tasks).
   */
  private static List<TopicRange> splitForParallelism(List<TopicRange> spans, Long minPartitions) {
    if (minPartitions == null || spans.size() >= minPartitions) {
      return spans;
    }
    long total = 0;
    for (TopicRange span : spans) {
      total += span.end() - span.start();
    }
    double ideal = (double) total / minPartitions;
    List<TopicRange> split = new ArrayList<>();
    for (TopicRange span : spans) {
      long size = span.end() - span.start();
      long parts = Math.max(1, Math.min(size, (long) Math.rint(size / ideal)));
      long low = span.start();
      for (long i = 1; i <= parts; i++) {
        long high = span.start() + Math.multiplyExact(size, i) / parts;
        split.add(new TopicRange(span.topic(), span.partition(), low, high, span.settings()));
        low = high;
      }
    }
    return split;
  }
}
