package io.gregor.spark.wire;

import io.gregor.spark.read.ReadSettings;
import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Where partitions' leaders are, as the last Metadata answer said, per bootstrap list and topic,
 * shared by the tasks of one JVM: Kafka's clients keep their metadata the same way, and ask
 * again only when a broker says it does not lead a partition (or is unreachable). Every task
 * asking the metadata for its own partition cost a round trip to the cluster first.
 *
 * <p>Whoever finds a leader wrong (NOT_LEADER_OR_FOLLOWER, a fenced epoch, a lost connection)
 * must {@link #invalidate} the topic, so that the next question asks the cluster again.
 */
public final class LeaderCache {
  /** A partition's leader and its epoch (for Fetch's and ListOffsets' current leader epoch). */
  public record Route(InetSocketAddress address, int epoch) {}

  private static final Map<String, ClusterMetadata> TOPICS = new HashMap<>();

  private LeaderCache() {}

  /**
   * The partition's leader, from the cache or else from a Metadata request to the bootstrap
   * servers. A topic the metadata answers with an error is not cached, and the error is
   * thrown as a {@link TopicUnavailable} with its code (whether it is worth asking again is the
   * caller's to say: a reader waits for its topic as the Python reader does).
   */
  public static Route route(ReadSettings s, String topic, int partition)
      throws LeaderUnavailable {
    String key = key(s, topic);
    ClusterMetadata metadata;
    synchronized (TOPICS) {
      metadata = TOPICS.get(key);
    }
    Route route = metadata == null ? null : routeIn(metadata, topic, partition);
    if (route != null) {
      return route;
    }
    // Kept open for the Fetch that follows: the bootstrap server is often the leader.
    KafkaConnection any = Bootstrap.connectAny(s);
    try {
      metadata = ClusterMetadata.fetch(any, List.of(topic));
    } catch (LeaderUnavailable | RuntimeException e) {
      any.close();
      throw e;
    }
    ConnectionPool.release(s, any);
    short error = metadata.topicError(topic);
    if (error != ErrorCodes.NONE) {
      throw new TopicUnavailable(topic + ": metadata says " + ErrorCodes.name(error), error);
    }
    synchronized (TOPICS) {
      TOPICS.put(key, metadata);
    }
    route = routeIn(metadata, topic, partition);
    if (route == null) {
      throw new LeaderUnavailable(topic + "-" + partition + " has no live leader in metadata");
    }
    return route;
  }

  /** Forgets the topic's leaders: one of them was found wrong or unreachable. */
  public static void invalidate(ReadSettings s, String topic) {
    synchronized (TOPICS) {
      TOPICS.remove(key(s, topic));
    }
  }

  private static Route routeIn(ClusterMetadata metadata, String topic, int partition) {
    InetSocketAddress address = metadata.brokers().get(metadata.leader(topic, partition));
    return address == null ? null : new Route(address, metadata.leaderEpoch(topic, partition));
  }

  private static String key(ReadSettings s, String topic) {
    return s.bootstrapServers() + "\n" + topic;
  }
}
