package io.gregor.spark.wire;

import io.gregor.spark.read.ReadSettings;
import io.gregor.spark.read.TopicPartition;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * ListOffsets (v5, the last non-flexible version, which has the isolation level): where a
 * partition's log starts (timestamp -2), ends (-1: high watermark, or last stable offset at
 * read_committed), or first reaches a timestamp.
 */
public final class ListOffsets {
  static final short API_KEY = 2;
  static final short VERSION = 5;
  public static final long EARLIEST = -2;
  public static final long LATEST = -1;
  /** How long the driver keeps asking through leader changes (offset_lookup.py's timeout). */
  static final long REQUEST_TIMEOUT_MS = 30_000;

  private ListOffsets() {}

  /**
   * Asks one broker, which must lead every partition asked about. Returns {offset, timestamp}
   * per partition (offset -1 when no record is at or after a timestamp); any partition's error
   * fails the whole question, with the error's name: as LeaderUnavailable when asking again
   * may help (the leader moved, say), else as a {@link BrokerError}.
   */
  public static Map<TopicPartition, long[]> query(
      KafkaConnection c, Map<TopicPartition, Long> timestamps, byte isolationLevel)
      throws LeaderUnavailable {
    Map<String, List<Map.Entry<TopicPartition, Long>>> byTopic = new TreeMap<>();
    for (Map.Entry<TopicPartition, Long> e : timestamps.entrySet()) {
      byTopic.computeIfAbsent(e.getKey().topic(), t -> new ArrayList<>()).add(e);
    }
    RequestBuffer body = new RequestBuffer().int32(-1).int8(isolationLevel).int32(byTopic.size());
    for (Map.Entry<String, List<Map.Entry<TopicPartition, Long>>> topic : byTopic.entrySet()) {
      body.string(topic.getKey()).int32(topic.getValue().size());
      for (Map.Entry<TopicPartition, Long> p : topic.getValue()) {
        body.int32(p.getKey().partition()).int32(-1).int64(p.getValue());
      }
    }
    ByteBuffer b = c.roundTrip(API_KEY, VERSION, body.toByteBuffer());
    b.getInt(); // throttle time
    Map<TopicPartition, long[]> found = new HashMap<>();
    for (int t = b.getInt(); t > 0; t--) {
      String topic = Answers.string(b);
      for (int p = b.getInt(); p > 0; p--) {
        TopicPartition tp = new TopicPartition(topic, b.getInt());
        short error = b.getShort();
        long timestamp = b.getLong();
        long offset = b.getLong();
        b.getInt(); // leader epoch
        if (error != ErrorCodes.NONE) {
          String message = tp + ": ListOffsets answered " + ErrorCodes.name(error);
          if (ErrorCodes.retriable(error)) {
            throw new LeaderUnavailable(message);
          }
          throw new BrokerError(message);
        }
        found.put(tp, new long[] {offset, timestamp});
      }
    }
    for (TopicPartition tp : timestamps.keySet()) {
      if (!found.containsKey(tp)) {
        throw new LeaderUnavailable(tp + ": the ListOffsets answer does not name it");
      }
    }
    return found;
  }

  /**
   * The same question for partitions led by different brokers: each leader is asked once about
   * all of its partitions. Retriable errors (the leader moved or is not there yet, a broker
   * unreachable) are asked again, with the metadata asked again, after the retry backoff for
   * up to 30 s, as the driver's AdminClient did; the others fail at once, with the error's name
   * ({@link BrokerError}). A topic the metadata does not know is one of those.
   */
  public static Map<TopicPartition, long[]> fromLeaders(
      ReadSettings s, Map<TopicPartition, Long> timestamps, byte isolationLevel)
      throws LeaderUnavailable {
    Map<TopicPartition, long[]> found = new HashMap<>();
    Map<TopicPartition, Long> left = new LinkedHashMap<>(timestamps);
    long deadline = System.currentTimeMillis() + REQUEST_TIMEOUT_MS;
    while (true) {
      LeaderUnavailable last = null;
      try {
        askLeaders(s, left, isolationLevel, found);
      } catch (LeaderUnavailable e) {
        last = e;
      }
      left.keySet().removeAll(found.keySet());
      if (left.isEmpty()) {
        return found;
      }
      if (System.currentTimeMillis() >= deadline) {
        throw last != null ? last : new LeaderUnavailable("ListOffsets: no answer for " + left);
      }
      try {
        Thread.sleep(s.retryBackoffMs());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new LeaderUnavailable("interrupted while asking for offsets", e);
      }
    }
  }

  /**
   * One round: each leader (as the JVM's LeaderCache knows it) is asked about its partitions;
   * partitions whose leader failed stay out of found, and their topics' leaders are looked up
   * again next round.
   */
  private static void askLeaders(
      ReadSettings s,
      Map<TopicPartition, Long> timestamps,
      byte isolationLevel,
      Map<TopicPartition, long[]> found)
      throws LeaderUnavailable {
    Map<InetSocketAddress, Map<TopicPartition, Long>> byLeader = new LinkedHashMap<>();
    LeaderUnavailable failure = null;
    for (Map.Entry<TopicPartition, Long> e : timestamps.entrySet()) {
      TopicPartition tp = e.getKey();
      LeaderCache.Route route;
      try {
        route = LeaderCache.route(s, tp.topic(), tp.partition());
      } catch (TopicUnavailable unknown) {
        if (unknown.error() == ErrorCodes.UNKNOWN_TOPIC_OR_PARTITION
            || !ErrorCodes.retriable(unknown.error())) {
          throw new BrokerError(unknown.getMessage());
        }
        failure = unknown;
        continue;
      } catch (LeaderUnavailable unavailable) {
        failure = unavailable;
        continue;
      }
      byLeader.computeIfAbsent(route.address(), l -> new LinkedHashMap<>()).put(tp, e.getValue());
    }
    for (Map.Entry<InetSocketAddress, Map<TopicPartition, Long>> group : byLeader.entrySet()) {
      Map<TopicPartition, Long> asked = group.getValue();
      try {
        KafkaConnection leader = ConnectionPool.borrow(s, group.getKey());
        try {
          found.putAll(query(leader, asked, isolationLevel));
        } catch (LeaderUnavailable | RuntimeException e) {
          leader.close();
          throw e;
        }
        ConnectionPool.release(s, leader);
      } catch (LeaderUnavailable e) {
        for (TopicPartition tp : asked.keySet()) {
          LeaderCache.invalidate(s, tp.topic());
        }
        failure = e;
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}
