package io.gregor.spark.wire;

import io.gregor.spark.read.ReadSettings;
import java.net.InetSocketAddress;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;

/**
 * Idle broker connections shared by the tasks of one JVM (an executor, or the driver), as
 * Spark's Kafka connector pools its consumers per executor. A task reads for a fraction of a
 * second, and opening a connection for each one cost it a TCP handshake and a receive window
 * that starts small again; the next task takes over the last one's connection instead, with
 * the answer buffer it grew.
 *
 * <p>Only connections with nothing in flight come back; one that failed is closed by its user
 * instead. A connection the broker closed while idle is noticed when taken and dropped.
 */
public final class ConnectionPool {
  /**
   * Idle connections kept per broker: as many as tasks of an executor read from it at once,
   * so more only hold answer buffers.
   */
  static final int MAX_IDLE = Math.max(2, Runtime.getRuntime().availableProcessors());

  private static final Map<String, ArrayDeque<KafkaConnection>> IDLE = new HashMap<>();

  private ConnectionPool() {}

  /** An idle connection to {@code address} for these settings, or a new one. */
  public static KafkaConnection borrow(ReadSettings s, InetSocketAddress address)
      throws LeaderUnavailable {
    String key = key(s, address.getHostString() + ":" + address.getPort());
    while (true) {
      KafkaConnection idle;
      synchronized (IDLE) {
        ArrayDeque<KafkaConnection> connections = IDLE.get(key);
        idle = connections == null ? null : connections.pollLast();
      }
      if (idle == null) {
        return Bootstrap.connect(s, address);
      }
      if (idle.reusable()) {
        return idle;
      }
      idle.close();
    }
  }

  /**
   * Gives back a connection its user is done with: kept if it can take the next request (none
   * in flight), else closed. Its answer buffer must no longer be used by the one giving it
   * back.
   */
  public static void release(ReadSettings s, KafkaConnection connection) {
    if (connection.reusable()) {
      synchronized (IDLE) {
        ArrayDeque<KafkaConnection> connections =
            IDLE.computeIfAbsent(key(s, connection.address()), k -> new ArrayDeque<>());
        if (connections.size() < MAX_IDLE) {
          connections.addLast(connection);
          return;
        }
      }
    }
    connection.close();
  }

  private static String key(ReadSettings s, String address) {
    String security = s.security() == null ? "" : s.security().poolKey();
    return s.clientId() + "\n" + s.socketTimeoutMs() + "\n" + security + "\n" + address;
  }
}
