package io.gregor.spark.read;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Offsets [start, end) of one topic-partition: one task. Bounded by offsets, not by a record
 * count, because compaction and transaction markers leave gaps. It carries the read settings
 * because an executor has nothing else of the query.
 */
public record TopicRange(String topic, int partition, long start, long end, ReadSettings settings)
    implements InputPartition {
  private static final long serialVersionUID = 1L;

  /** No locality: any executor reaches the leader over the network. */
  @Override
  public String[] preferredLocations() {
    return new String[0];
  }
}
