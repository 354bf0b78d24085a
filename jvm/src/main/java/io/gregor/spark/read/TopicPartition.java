package io.gregor.spark.read;

import java.io.Serializable;

/** One partition of one topic; ordered by topic, then partition, as the Python source sorts. */
public record TopicPartition(String topic, int partition)
    implements Comparable<TopicPartition>, Serializable {
  private static final long serialVersionUID = 1L;

  @Override
  public int compareTo(TopicPartition other) {
    int byTopic = topic.compareTo(other.topic);
    return byTopic != 0 ? byTopic : Integer.compare(partition, other.partition);
  }

  @Override
  public String toString() {
    return topic + "-" + partition;
  }
}
