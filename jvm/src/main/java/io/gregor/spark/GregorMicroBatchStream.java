package io.gregor.spark;

import io.gregor.spark.plan.OffsetCaps;
import io.gregor.spark.plan.OffsetLookup;
import io.gregor.spark.plan.OffsetsJson;
import io.gregor.spark.plan.RangePlanner;
import io.gregor.spark.plan.SourceOptions;
import io.gregor.spark.read.DataLoss;
import io.gregor.spark.read.TopicPartition;
import io.gregor.spark.read.TopicRangeReaderFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.LongSummaryStatistics;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.Clock;
import org.apache.spark.util.SystemClock;

/**
 * spark.readStream.format("gregor"): micro-batches of new records (stream_reader.py), with
 * maxOffsetsPerTrigger, minOffsetsPerTrigger with maxTriggerDelay, and availableNow.
 *
 * <p>Partitions that appear while the query runs (new topics matching subscribePattern,
 * partitions added to a topic) are read from their earliest offset, as in Spark.
 * minOffsetsPerTrigger holds a trigger back (latestOffset answers its start) while fewer new
 * offsets than that are there, until maxTriggerDelay has passed since the last micro-batch; the
 * first trigger of a run is never held, and under availableNow it is ignored, since waiting
 * there could never end. The checkpoint, not a consumer group, holds the progress, so nothing
 * is committed to the broker.
 */
public final class GregorMicroBatchStream
    implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  private final SourceOptions options;
  private final StructType readSchema;
  private final OffsetLookup lookup;
  private final Clock clock;
  private Map<TopicPartition, Long> availableNowEnd;
  private Map<TopicPartition, Long> latestSeen;
  private Long lastTriggerNanos;

  GregorMicroBatchStream(SourceOptions options, StructType readSchema) {
    this(options, readSchema, new SystemClock());
  }

  /** With a clock of the caller's, which a test moves instead of waiting for maxTriggerDelay. */
  public GregorMicroBatchStream(SourceOptions options, StructType readSchema, Clock clock) {
    this.options = options;
    this.readSchema = readSchema;
    this.lookup = new OffsetLookup(options.readSettings());
    this.clock = clock;
  }

  @Override
  public Offset initialOffset() {
    List<TopicPartition> tps = lookup.partitions(options.subscription());
    return new GregorOffset(
        lookup.resolve(options.starting(), tps, true, options.failIfNoTimestampMatch()));
  }

  /**
   * The row cap, if any; minOffsetsPerTrigger is applied in latestOffset from the options, as
   * the Python source does (it has no composite limit to pass both).
   */
  @Override
  public ReadLimit getDefaultReadLimit() {
    Long limit = options.maxOffsetsPerTrigger();
    return limit != null ? ReadLimit.maxRows(limit) : ReadLimit.allAvailable();
  }

  /** Freeze the end of the query at today's log ends; later records wait for the next run. */
  @Override
  public void prepareForTriggerAvailableNow() {
    availableNowEnd = lookup.latest(lookup.partitions(options.subscription()));
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "latestOffset(start, limit) is the one Spark calls on a source with admission control");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    Map<TopicPartition, Long> begin = GregorOffset.of(startOffset).offsets();
    Map<TopicPartition, Long> latest = latestOffsets(begin);
    latestSeen = latest;
    if (holdTrigger(begin, latest)) {
      return new GregorOffset(begin);
    }
    List<TopicPartition> fresh = new ArrayList<>();
    for (TopicPartition tp : latest.keySet()) {
      if (!begin.containsKey(tp)) {
        fresh.add(tp);
      }
    }
    Map<TopicPartition, Long> capped;
    if (limit instanceof ReadMaxRows maxRows) {
      Map<TopicPartition, Long> earliest = lookup.earliest(latest.keySet());
      for (TopicPartition tp : fresh) {
        begin.put(tp, earliest.get(tp));
      }
      // Share the budget among offsets that still exist. Counted from begin, offsets deleted by
      // retention would use it up: with failOnDataLoss=false the query would creep through the
      // deleted range one empty micro-batch (and one warning) at a time instead of skipping it
      // in one. planInputPartitions still sees begin below the log start and reports the loss.
      Map<TopicPartition, Long> base = new TreeMap<>();
      for (Map.Entry<TopicPartition, Long> entry : latest.entrySet()) {
        TopicPartition tp = entry.getKey();
        base.put(tp, Math.max(begin.get(tp), Math.min(earliest.get(tp), entry.getValue())));
      }
      capped = OffsetCaps.cap(base, latest, maxRows.maxRows());
    } else {
      begin.putAll(lookup.earliest(fresh));
      capped = latest;
    }
    // A log that now ends before where the query is (the topic was deleted and created again,
    // or an unclean leader election truncated it) moves the end back, as in Spark:
    // planInputPartitions reports the records that are gone, and reading goes on from there.
    Map<TopicPartition, Long> end = new TreeMap<>();
    for (TopicPartition tp : latest.keySet()) {
      long last = latest.get(tp);
      end.put(tp, last < begin.get(tp) ? last : Math.max(begin.get(tp), capped.get(tp)));
    }
    return new GregorOffset(end);
  }

  /**
   * minOffsetsPerTrigger: too few new offsets, and not yet maxTriggerDelay since the last
   * micro-batch (offsets of new partitions count from 0, as in Spark).
   */
  private boolean holdTrigger(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> latest) {
    Long minimum = options.minOffsetsPerTrigger();
    if (minimum == null || availableNowEnd != null) {
      return false;
    }
    long now = clock.nanoTime();
    long fresh = 0;
    for (Map.Entry<TopicPartition, Long> entry : latest.entrySet()) {
      fresh += Math.max(0, entry.getValue() - begin.getOrDefault(entry.getKey(), 0L));
    }
    if (lastTriggerNanos != null
        && (now - lastTriggerNanos) / 1_000_000.0 < options.maxTriggerDelayMs()
        && fresh < minimum) {
      return true;
    }
    lastTriggerNanos = now;
    return false;
  }

  /** The log ends seen by the last latestOffset call, for query progress. */
  @Override
  public Offset reportLatestOffset() {
    return latestSeen == null ? null : new GregorOffset(latestSeen);
  }

  /**
   * How far the query is behind the log ends seen last, per partition, in the query progress
   * (sources[].metrics), under the names and in the form of Spark's Kafka source: dashboards
   * and alerts written for it read minOffsetsBehindLatest, maxOffsetsBehindLatest and
   * avgOffsetsBehindLatest.
   */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    if (latestConsumedOffset.isEmpty() || latestSeen == null || latestSeen.isEmpty()) {
      return Map.of();
    }
    Map<TopicPartition, Long> consumed = GregorOffset.of(latestConsumedOffset.get()).offsets();
    LongSummaryStatistics behind = new LongSummaryStatistics();
    for (Map.Entry<TopicPartition, Long> entry : latestSeen.entrySet()) {
      behind.accept(entry.getValue() - consumed.getOrDefault(entry.getKey(), 0L));
    }
    return Map.of(
        "minOffsetsBehindLatest", Long.toString(behind.getMin()),
        "maxOffsetsBehindLatest", Long.toString(behind.getMax()),
        "avgOffsetsBehindLatest", Double.toString(behind.getAverage()));
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    Map<TopicPartition, Long> begin = GregorOffset.of(start).offsets();
    Map<TopicPartition, Long> stop = GregorOffset.of(end).offsets();
    if (begin.equals(stop)) {
      return new InputPartition[0];
    }
    Map<TopicPartition, Long> earliest = lookup.earliest(stop.keySet());
    for (Map.Entry<TopicPartition, Long> entry : stop.entrySet()) {
      TopicPartition tp = entry.getKey();
      long last = entry.getValue();
      if (!begin.containsKey(tp)) {
        // A partition first seen in this batch starts at its log start (capped at the planned
        // end so that deletions since latestOffset show up as data loss), which is 0 unless
        // records went before the query saw it (Spark reports that too).
        begin.put(tp, Math.min(earliest.get(tp), last));
        if (earliest.get(tp) != 0) {
          DataLoss.report(
              tp + ": added partition starts at offset " + earliest.get(tp) + ", not 0",
              options.failOnDataLoss());
        }
      }
      if (last < begin.get(tp)) {
        DataLoss.report(
            tp + ": offset was changed from " + begin.get(tp) + " to " + last,
            options.failOnDataLoss());
        begin.put(tp, last);
      }
    }
    return RangePlanner.plan(
            begin, stop, earliest, options.readSettings(), options.minPartitions(), options.maxRecordsPerPartition())
        .toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new TopicRangeReaderFactory(readSchema);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new GregorOffset(OffsetsJson.read(json));
  }

  /** The stream's name in query progress ("description"), where a Python source's is Spark's. */
  @Override
  public String toString() {
    return "GregorMicroBatchStream[" + options.subscription() + "]";
  }

  /** Nothing to do: the checkpoint holds the progress, so retention alone decides what goes. */
  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}

  /**
   * Log ends of the subscribed partitions, or the frozen ends under availableNow. Partitions of
   * begin that no longer exist are data loss, under availableNow too (as in Spark); partitions
   * created after the ends were frozen stay where they are until the next run.
   */
  private Map<TopicPartition, Long> latestOffsets(Map<TopicPartition, Long> begin) {
    Map<TopicPartition, Long> latest;
    TreeSet<TopicPartition> gone = new TreeSet<>(begin.keySet());
    if (availableNowEnd != null) {
      latest = new TreeMap<>(availableNowEnd);
      gone.removeAll(latest.keySet());
      if (!gone.isEmpty()) {
        // Either gone since, or created after the ends were frozen: the latter wait there.
        for (TopicPartition tp : lookup.partitions(options.subscription())) {
          if (gone.remove(tp)) {
            latest.put(tp, begin.get(tp));
          }
        }
      }
    } else {
      latest = latestBeyond(begin);
      gone.removeAll(latest.keySet());
    }
    if (!gone.isEmpty()) {
      List<String> names = new ArrayList<>();
      for (TopicPartition tp : gone) {
        names.add(tp.toString());
      }
      DataLoss.report(
          "partitions " + String.join(", ", names) + " no longer exist", options.failOnDataLoss());
    }
    return latest;
  }

  /**
   * Log ends of the subscribed partitions, asked again (fetchOffset.numRetries times,
   * fetchOffset.retryIntervalMs apart, as Spark's Kafka source) while one is below where the
   * query is: a new leader's high watermark can lag for a moment, and that is no data loss.
   */
  private Map<TopicPartition, Long> latestBeyond(Map<TopicPartition, Long> begin) {
    for (int attempt = 1; ; attempt++) {
      Map<TopicPartition, Long> latest = lookup.latest(lookup.partitions(options.subscription()));
      boolean behind = false;
      for (Map.Entry<TopicPartition, Long> entry : latest.entrySet()) {
        Long known = begin.get(entry.getKey());
        behind |= known != null && known > entry.getValue();
      }
      if (!behind || attempt >= options.fetchOffsetNumRetries()) {
        return latest;
      }
      try {
        Thread.sleep(options.fetchOffsetRetryIntervalMs());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return latest;
      }
    }
  }
}
