package io.gregor.spark.wire;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A Metadata answer (v8, the last non-flexible version, served by gregor and Apache Kafka alike):
 * the live brokers, and each topic's partitions with their leaders.
 */
public final class ClusterMetadata {
  static final short API_KEY = 3;
  static final short VERSION = 8;

  private final Map<Integer, InetSocketAddress> brokers;
  private final Map<String, Short> topicErrors;
  private final Map<String, int[]> leaders;
  private final Map<String, int[]> leaderEpochs;

  private ClusterMetadata(
      Map<Integer, InetSocketAddress> brokers,
      Map<String, Short> topicErrors,
      Map<String, int[]> leaders,
      Map<String, int[]> leaderEpochs) {
    this.brokers = brokers;
    this.topicErrors = topicErrors;
    this.leaders = leaders;
    this.leaderEpochs = leaderEpochs;
  }

  /**
   * Asks about {@code topics}, or about every topic when it is null. Topics are never
   * auto-created: a read must not create what it reads.
   */
  public static ClusterMetadata fetch(KafkaConnection c, List<String> topics)
      throws LeaderUnavailable {
    RequestBuffer body = new RequestBuffer();
    if (topics == null) {
      body.int32(-1);
    } else {
      body.int32(topics.size());
      for (String topic : topics) {
        body.string(topic);
      }
    }
    body.int8(0).int8(0).int8(0); // auto-create, cluster and topic authorized operations: no
    return parse(c.roundTrip(API_KEY, VERSION, body.toByteBuffer()));
  }

  private static ClusterMetadata parse(ByteBuffer b) {
    b.getInt(); // throttle time
    Map<Integer, InetSocketAddress> brokers = new HashMap<>();
    for (int i = b.getInt(); i > 0; i--) {
      int nodeId = b.getInt();
      String host = Answers.string(b);
      int port = b.getInt();
      Answers.string(b); // rack
      brokers.put(nodeId, InetSocketAddress.createUnresolved(host, port));
    }
    Answers.string(b); // cluster id
    b.getInt(); // controller id
    Map<String, Short> errors = new HashMap<>();
    Map<String, int[]> leaders = new HashMap<>();
    Map<String, int[]> epochs = new HashMap<>();
    for (int t = b.getInt(); t > 0; t--) {
      short error = b.getShort();
      String name = Answers.string(b);
      b.get(); // is internal
      int count = b.getInt();
      int[] leaderOf = new int[Math.max(count, 0)];
      int[] epochOf = new int[leaderOf.length];
      Arrays.fill(leaderOf, -1);
      Arrays.fill(epochOf, -1);
      for (int p = 0; p < count; p++) {
        b.getShort(); // partition error: a partition without a leader says -1 anyway
        int index = b.getInt();
        int leader = b.getInt();
        int epoch = b.getInt();
        Answers.skipInt32s(b); // replicas
        Answers.skipInt32s(b); // in-sync replicas
        Answers.skipInt32s(b); // offline replicas
        if (index >= 0 && index < count) {
          leaderOf[index] = leader;
          epochOf[index] = epoch;
        }
      }
      b.getInt(); // topic authorized operations
      errors.put(name, error);
      leaders.put(name, leaderOf);
      epochs.put(name, epochOf);
    }
    return new ClusterMetadata(brokers, errors, leaders, epochs);
  }

  /** Partition counts of the topics answered without an error. */
  public Map<String, Integer> partitionCounts() {
    Map<String, Integer> counts = new HashMap<>();
    for (Map.Entry<String, int[]> e : leaders.entrySet()) {
      if (topicErrors.get(e.getKey()) == ErrorCodes.NONE) {
        counts.put(e.getKey(), e.getValue().length);
      }
    }
    return counts;
  }

  /** Live brokers by node id (addresses unresolved: resolved when connecting). */
  public Map<Integer, InetSocketAddress> brokers() {
    return Collections.unmodifiableMap(brokers);
  }

  /** The leader's node id, or -1 if the partition has none or is not in the answer. */
  public int leader(String topic, int partition) {
    int[] of = leaders.get(topic);
    return of == null || partition < 0 || partition >= of.length ? -1 : of[partition];
  }

  /** The partition's leader epoch, or -1 if unknown (then the broker does not check it). */
  public int leaderEpoch(String topic, int partition) {
    int[] of = leaderEpochs.get(topic);
    return of == null || partition < 0 || partition >= of.length ? -1 : of[partition];
  }

  /** The topic's error code; UNKNOWN_TOPIC_OR_PARTITION for a topic not in the answer. */
  public short topicError(String topic) {
    return topicErrors.getOrDefault(topic, ErrorCodes.UNKNOWN_TOPIC_OR_PARTITION);
  }
}
