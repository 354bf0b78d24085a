package io.gregor.spark.plan;

import io.gregor.spark.read.TopicPartition;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * Which topic-partitions a query reads: exactly one of Spark's three ways to say it (subscribe,
 * subscribePattern, assign).
 */
public record Subscription(Set<String> topics, Pattern pattern, List<TopicPartition> assigned) {
  /** Topics a Java consumer leaves out of pattern subscriptions (exclude.internal.topics). */
  private static final Set<String> INTERNAL_TOPICS =
      Set.of("__consumer_offsets", "__transaction_state");

  /**
   * The subscribed partitions, sorted, given the partition count of every topic in metadata.
   * A pattern selects the topics it is found in, not only those it matches whole: Spark's
   * Kafka source (its SubscribePatternStrategy, findFirstIn) selects "orders-eu" for "orders";
   * anchor it (^orders$) for one topic. Assigned partitions are those of them that exist, as
   * in Spark (AssignStrategy): one created later is picked up by a stream when it appears.
   */
  public List<TopicPartition> select(Map<String, Integer> partitionCounts) {
    List<TopicPartition> selected = new ArrayList<>();
    if (!assigned.isEmpty()) {
      for (TopicPartition tp : assigned) {
        if (tp.partition() < partitionCounts.getOrDefault(tp.topic(), 0)) {
          selected.add(tp);
        }
      }
    } else {
      for (Map.Entry<String, Integer> topic : partitionCounts.entrySet()) {
        String name = topic.getKey();
        boolean wanted =
            pattern != null
                ? !INTERNAL_TOPICS.contains(name) && pattern.matcher(name).find()
                : topics.contains(name);
        for (int p = 0; wanted && p < topic.getValue(); p++) {
          selected.add(new TopicPartition(name, p));
        }
      }
    }
    Collections.sort(selected);
    return selected;
  }

  /** How query progress and plans name what the stream reads, as the options said it. */
  @Override
  public String toString() {
    if (!assigned.isEmpty()) {
      return "assign=" + assigned;
    }
    return pattern != null ? "subscribePattern=" + pattern : "subscribe=" + new TreeSet<>(topics);
  }
}
