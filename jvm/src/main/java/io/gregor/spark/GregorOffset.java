package io.gregor.spark;

import io.gregor.spark.plan.OffsetsJson;
import io.gregor.spark.read.TopicPartition;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream's position: the next offset to read per partition, kept by Spark in the checkpoint
 * as {"topic": {"0": 42}} (the Python source's text, so either path resumes the other's query).
 */
final class GregorOffset extends Offset {
  private final Map<TopicPartition, Long> offsets;
  private final String json;

  GregorOffset(Map<TopicPartition, Long> offsets) {
    this.offsets = Collections.unmodifiableMap(new TreeMap<>(offsets));
    this.json = OffsetsJson.write(offsets);
  }

  static GregorOffset of(Offset offset) {
    return offset instanceof GregorOffset ours
        ? ours
        : new GregorOffset(OffsetsJson.read(offset.json()));
  }

  /** A copy the caller may change. */
  Map<TopicPartition, Long> offsets() {
    return new TreeMap<>(offsets);
  }

  @Override
  public String json() {
    return json;
  }
}
