package io.gregor.spark.plan;

import io.gregor.spark.plan.OffsetBound.AtTimestamp;
import io.gregor.spark.plan.OffsetBound.EarliestOrLatest;
import io.gregor.spark.plan.OffsetBound.SpecificOffsets;
import io.gregor.spark.plan.OffsetBound.SpecificTimestamps;
import io.gregor.spark.read.ReadSettings;
import io.gregor.spark.read.TopicPartition;
import io.gregor.spark.wire.Bootstrap;
import io.gregor.spark.wire.ClusterMetadata;
import io.gregor.spark.wire.KafkaConnection;
import io.gregor.spark.wire.LeaderUnavailable;
import io.gregor.spark.wire.ListOffsets;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The driver's questions to the cluster: which partitions exist, and where their logs start and
 * end or reach a timestamp (offset_lookup.py). Each leader is asked once for a whole set of
 * partitions, at the query's isolation level, so the log end is the last stable offset at
 * read_committed.
 */
public final class OffsetLookup {
  private final ReadSettings settings;

  public OffsetLookup(ReadSettings settings) {
    this.settings = settings;
  }

  /** The partitions the subscription covers right now, sorted. */
  public List<TopicPartition> partitions(Subscription subscription) {
    try (KafkaConnection connection = Bootstrap.connectAny(settings)) {
      return subscription.select(ClusterMetadata.fetch(connection, null).partitionCounts());
    } catch (LeaderUnavailable e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Log start offset per partition: data below it was deleted by retention. */
  public Map<TopicPartition, Long> earliest(Collection<TopicPartition> tps) {
    return listOffsets(same(tps, ListOffsets.EARLIEST));
  }

  /** Log end offset (high watermark, or last stable offset at read_committed). */
  public Map<TopicPartition, Long> latest(Collection<TopicPartition> tps) {
    return listOffsets(same(tps, ListOffsets.LATEST));
  }

  /**
   * Concrete offsets for {@code tps} from a parsed startingX/endingX option. A timestamp with no
   * record at or after it resolves to the log end, except for a starting bound whose
   * startingOffsetsByTimestampStrategy is error (as Spark).
   */
  public Map<TopicPartition, Long> resolve(
      OffsetBound bound,
      List<TopicPartition> tps,
      boolean starting,
      boolean failIfNoTimestampMatch) {
    Map<TopicPartition, Long> timestamps;
    if (bound instanceof EarliestOrLatest marker) {
      return marker.marker() == OffsetBound.EARLIEST ? earliest(tps) : latest(tps);
    } else if (bound instanceof SpecificOffsets given) {
      checkCovers(given.offsets().keySet(), tps, starting);
      Map<TopicPartition, Long> resolved = new TreeMap<>();
      List<TopicPartition> toEarliest = new ArrayList<>();
      List<TopicPartition> toLatest = new ArrayList<>();
      for (TopicPartition tp : tps) {
        long offset = given.offsets().get(tp);
        resolved.put(tp, offset);
        if (offset == OffsetBound.EARLIEST) {
          toEarliest.add(tp);
        } else if (offset == OffsetBound.LATEST) {
          toLatest.add(tp);
        }
      }
      resolved.putAll(earliest(toEarliest));
      resolved.putAll(latest(toLatest));
      return resolved;
    } else if (bound instanceof AtTimestamp at) {
      timestamps = same(tps, at.timestampMs());
    } else {
      SpecificTimestamps given = (SpecificTimestamps) bound;
      checkCovers(given.timestamps().keySet(), tps, starting);
      timestamps = new TreeMap<>();
      for (TopicPartition tp : tps) {
        timestamps.put(tp, given.timestamps().get(tp));
      }
    }
    Map<TopicPartition, Long> found = listOffsets(timestamps);
    List<TopicPartition> unmatched = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> entry : found.entrySet()) {
      if (entry.getValue() < 0) {
        unmatched.add(entry.getKey());
      }
    }
    if (!unmatched.isEmpty() && starting && failIfNoTimestampMatch) {
      List<String> named = new ArrayList<>();
      for (TopicPartition tp : unmatched) {
        named.add(tp + " (timestamp " + timestamps.get(tp) + ")");
      }
      throw new IllegalArgumentException(
          "no record at or after the starting timestamp in "
              + String.join(", ", named)
              + "; set startingOffsetsByTimestampStrategy=latest to start at the end instead");
    }
    found.putAll(latest(unmatched));
    return found;
  }

  private Map<TopicPartition, Long> listOffsets(Map<TopicPartition, Long> timestamps) {
    Map<TopicPartition, Long> offsets = new TreeMap<>();
    if (timestamps.isEmpty()) {
      return offsets;
    }
    try {
      for (Map.Entry<TopicPartition, long[]> found :
          ListOffsets.fromLeaders(settings, timestamps, settings.isolationLevel()).entrySet()) {
        offsets.put(found.getKey(), found.getValue()[0]);
      }
    } catch (LeaderUnavailable e) {
      throw new UncheckedIOException(e);
    }
    return offsets;
  }

  private static Map<TopicPartition, Long> same(Collection<TopicPartition> tps, long value) {
    Map<TopicPartition, Long> each = new TreeMap<>();
    for (TopicPartition tp : tps) {
      each.put(tp, value);
    }
    return each;
  }

  /**
   * Spark requires per-partition JSON to name exactly the subscribed partitions, so a typo or a
   * partition added since the job was written fails loudly instead of silently reading from a
   * default position.
   */
  private static void checkCovers(
      Set<TopicPartition> given, List<TopicPartition> tps, boolean starting) {
    Set<TopicPartition> missing = new TreeSet<>(tps);
    missing.removeAll(given);
    Set<TopicPartition> unknown = new TreeSet<>(given);
    unknown.removeAll(new HashSet<>(tps));
    if (!missing.isEmpty() || !unknown.isEmpty()) {
      throw new IllegalArgumentException(
          "per-partition "
              + (starting ? "starting" : "ending")
              + " offsets/timestamps must name every subscribed partition"
              + " (use -2 for earliest, -1 for latest); missing: "
              + PythonText.repr(names(missing))
              + ", not subscribed: "
              + PythonText.repr(names(unknown)));
    }
  }

  private static List<String> names(Set<TopicPartition> tps) {
    List<String> names = new ArrayList<>();
    for (TopicPartition tp : tps) {
      names.add(tp.toString());
    }
    return names;
  }
}
