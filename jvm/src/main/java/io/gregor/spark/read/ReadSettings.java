package io.gregor.spark.read;

import io.gregor.spark.wire.Bootstrap;
import io.gregor.spark.wire.Security;
import java.io.Serializable;
import java.util.Locale;
import java.util.Map;

/**
 * What every task of a read needs, built once on the driver from the options and shipped with
 * each TopicRange. The Fetch settings are named as in Kafka's clients ({@code kafka.} options);
 * the defaults are librdkafka's, except the larger per-partition size, which lets one request
 * carry a good share of a micro-batch (FetchSettings in partition_leader.py).
 */
public record ReadSettings(
    String bootstrapServers,
    String clientId,
    int maxWaitMs,
    int minBytes,
    int maxBytes,
    int partitionMaxBytes,
    byte isolationLevel,
    int socketTimeoutMs,
    int retryBackoffMs,
    boolean includeHeaders,
    boolean failOnDataLoss,
    int pollTimeoutMs,
    Security security)
    implements Serializable {
  private static final long serialVersionUID = 1L;

  public static final byte READ_UNCOMMITTED = 0;
  public static final byte READ_COMMITTED = 1;

  /**
   * From the {@code kafka.*} options with the prefix removed (the Python source's client_config);
   * other client options are the driver's and the sink's and are ignored here. TLS and SASL as
   * {@link Security} reads them.
   */
  public static ReadSettings fromOptions(
      Map<String, String> kafkaConfig,
      boolean includeHeaders,
      boolean failOnDataLoss,
      int pollTimeoutMs) {
    String level =
        kafkaConfig.getOrDefault("isolation.level", "read_uncommitted").toLowerCase(Locale.ROOT);
    if (!level.equals("read_uncommitted") && !level.equals("read_committed")) {
      throw new IllegalArgumentException(
          "kafka.isolation.level must be read_uncommitted or read_committed, got '" + level + "'");
    }
    String servers = kafkaConfig.get("bootstrap.servers");
    if (servers == null) {
      throw new IllegalArgumentException("kafka.bootstrap.servers is required");
    }
    Bootstrap.parse(servers); // fail on the driver, not in every task
    return new ReadSettings(
        servers,
        kafkaConfig.getOrDefault("client.id", "gregor-spark"),
        number(kafkaConfig, "fetch.wait.max.ms", 500),
        number(kafkaConfig, "fetch.min.bytes", 1),
        number(kafkaConfig, "fetch.max.bytes", 52_428_800),
        number(kafkaConfig, "max.partition.fetch.bytes", 8 << 20),
        level.equals("read_committed") ? READ_COMMITTED : READ_UNCOMMITTED,
        number(kafkaConfig, "socket.timeout.ms", 60_000),
        number(kafkaConfig, "retry.backoff.ms", 100),
        includeHeaders,
        failOnDataLoss,
        pollTimeoutMs,
        Security.fromConfig(kafkaConfig));
  }

  private static int number(Map<String, String> config, String option, int fallback) {
    String given = config.get(option);
    if (given == null) {
      return fallback;
    }
    try {
      return Integer.parseInt(given.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          "kafka." + option + " must be an integer, got '" + given + "'", e);
    }
  }
}
