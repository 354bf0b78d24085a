package io.gregor.spark.plan;

import io.gregor.spark.read.TopicPartition;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** A micro-batch's row budget (maxOffsetsPerTrigger) split across partitions (read_limit.py). */
public final class OffsetCaps {
  private OffsetCaps() {}

  /**
   * End offsets that read at most {@code maxRows} offsets in total from {@code start}. The budget
   * is shared max-min fairly: each partition gets an equal share, and what a partition with
   * little backlog leaves unused goes to the others, so a quiet partition is never starved behind
   * a busy one and, with a budget of at least 1, some partition with data always advances.
   * {@code start} must name every partition of {@code latest}.
   */
  public static Map<TopicPartition, Long> cap(
      Map<TopicPartition, Long> start, Map<TopicPartition, Long> latest, long maxRows) {
    Map<TopicPartition, Long> available = new HashMap<>();
    for (Map.Entry<TopicPartition, Long> entry : latest.entrySet()) {
      available.put(entry.getKey(), Math.max(0, entry.getValue() - start.get(entry.getKey())));
    }
    List<TopicPartition> order = new ArrayList<>(available.keySet());
    order.sort(
        Comparator.comparing((TopicPartition tp) -> available.get(tp))
            .thenComparing(Comparator.naturalOrder()));
    long budget = maxRows;
    Map<TopicPartition, Long> end = new TreeMap<>();
    for (int index = 0; index < order.size(); index++) {
      TopicPartition tp = order.get(index);
      long take = Math.min(available.get(tp), budget / (order.size() - index));
      end.put(tp, start.get(tp) + take);
      budget -= take;
    }
    return end;
  }
}
