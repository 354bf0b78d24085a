package io.gregor.spark.wire;

import io.gregor.spark.read.ReadSettings;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;

/** Finding brokers from {@code bootstrap.servers}, each tried in turn as Kafka's clients do. */
public final class Bootstrap {
  private Bootstrap() {}

  /** A connection to a partition's leader, and the leader epoch the metadata gave with it. */
  public record Leader(KafkaConnection connection, int epoch) {}

  /**
   * host:port pairs of a bootstrap list, in order ({@code PLAINTEXT://} prefixes and IPv6
   * brackets allowed); the same messages as parse_bootstrap in partition_leader.py.
   */
  public static List<InetSocketAddress> parse(String servers) {
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (String entry : servers.split(",", -1)) {
      String item = entry.strip();
      int scheme = item.lastIndexOf("://");
      if (scheme >= 0) {
        item = item.substring(scheme + 3);
      }
      if (item.isEmpty()) {
        continue;
      }
      int colon = item.lastIndexOf(':');
      String port = colon < 0 ? "" : item.substring(colon + 1);
      if (colon < 0 || port.isEmpty() || !port.chars().allMatch(Character::isDigit)) {
        throw new IllegalArgumentException("bootstrap server '" + item + "' is not host:port");
      }
      String host = item.substring(0, colon).replace("[", "").replace("]", "");
      addresses.add(InetSocketAddress.createUnresolved(host, Integer.parseInt(port)));
    }
    if (addresses.isEmpty()) {
      throw new IllegalArgumentException("no bootstrap server in '" + servers + "'");
    }
    return addresses;
  }

  /** A connection to the first bootstrap server that accepts one. */
  public static KafkaConnection connectAny(ReadSettings s) throws LeaderUnavailable {
    List<String> failures = new ArrayList<>();
    for (InetSocketAddress address : parse(s.bootstrapServers())) {
      try {
        return connect(s, address);
      } catch (LeaderUnavailable e) {
        failures.add(e.getMessage());
      }
    }
    throw new LeaderUnavailable("no bootstrap server answered: " + String.join("; ", failures));
  }

  /**
   * A connection to the broker at {@code address}, with the settings' client id, timeout and
   * security.
   */
  public static KafkaConnection connect(ReadSettings s, InetSocketAddress address)
      throws LeaderUnavailable {
    return KafkaConnection.open(
        address.getHostString(), address.getPort(), s.clientId(), s.socketTimeoutMs(),
        s.security());
  }

  /**
   * The partition's leader, connected, with its epoch (for Fetch's current leader epoch): the
   * leader as last known in this JVM ({@link LeaderCache}) and a pooled connection to it
   * ({@link ConnectionPool}). Whoever finds it wrong or unreachable invalidates the topic.
   */
  public static Leader leader(ReadSettings s, String topic, int partition)
      throws LeaderUnavailable {
    LeaderCache.Route route = LeaderCache.route(s, topic, partition);
    KafkaConnection connection;
    try {
      connection = ConnectionPool.borrow(s, route.address());
    } catch (LeaderUnavailable e) {
      LeaderCache.invalidate(s, topic);
      throw e;
    }
    return new Leader(connection, route.epoch());
  }
}
