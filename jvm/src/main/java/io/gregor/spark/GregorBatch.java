package io.gregor.spark;

import io.gregor.spark.plan.OffsetLookup;
import io.gregor.spark.plan.RangePlanner;
import io.gregor.spark.plan.SourceOptions;
import io.gregor.spark.read.TopicPartition;
import io.gregor.spark.read.TopicRange;
import io.gregor.spark.read.TopicRangeReaderFactory;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;

/**
 * spark.read.format("gregor"): one task per offset range. The offsets are resolved once, at the
 * first planInputPartitions, so every task of the query sees the same end offsets even while
 * producers keep appending.
 */
final class GregorBatch implements Batch {
  private final SourceOptions options;
  private final StructType readSchema;
  private InputPartition[] planned;

  GregorBatch(SourceOptions options, StructType readSchema) {
    this.options = options;
    this.readSchema = readSchema;
  }

  @Override
  public synchronized InputPartition[] planInputPartitions() {
    if (planned == null) {
      OffsetLookup lookup = new OffsetLookup(options.readSettings());
      List<TopicPartition> tps = lookup.partitions(options.subscription());
      Map<TopicPartition, Long> start =
          lookup.resolve(options.starting(), tps, true, options.failIfNoTimestampMatch());
      Map<TopicPartition, Long> end = lookup.resolve(options.ending(), tps, false, false);
      List<TopicRange> ranges =
          RangePlanner.plan(
              start, end, lookup.earliest(tps), options.readSettings(), options.minPartitions(), options.maxRecordsPerPartition());
      planned = ranges.toArray(new InputPartition[0]);
    }
    return planned;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new TopicRangeReaderFactory(readSchema);
  }
}
