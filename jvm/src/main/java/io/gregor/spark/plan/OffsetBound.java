package io.gregor.spark.plan;

import io.gregor.spark.read.TopicPartition;
import java.util.Map;

/** Where a read starts or ends, as one of the startingX/endingX options says it. */
public sealed interface OffsetBound {
  /** Kafka's (and Spark's JSON options') marker for "the log start offset". */
  long EARLIEST = -2;
  /** Kafka's (and Spark's JSON options') marker for "the log end offset". */
  long LATEST = -1;

  /** Every partition starts or ends at its log start (EARLIEST) or end (LATEST). */
  record EarliestOrLatest(long marker) implements OffsetBound {}

  /** Per-partition offsets; a value may be EARLIEST (-2) or LATEST (-1). */
  record SpecificOffsets(Map<TopicPartition, Long> offsets) implements OffsetBound {}

  /** Every partition at the first record whose timestamp is >= timestampMs. */
  record AtTimestamp(long timestampMs) implements OffsetBound {}

  /** Per-partition timestamps in milliseconds. */
  record SpecificTimestamps(Map<TopicPartition, Long> timestamps) implements OffsetBound {}
}
