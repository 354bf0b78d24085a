package io.gregor.spark.plan;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.gregor.spark.plan.OffsetBound.AtTimestamp;
import io.gregor.spark.plan.OffsetBound.EarliestOrLatest;
import io.gregor.spark.plan.OffsetBound.SpecificOffsets;
import io.gregor.spark.plan.OffsetBound.SpecificTimestamps;
import io.gregor.spark.read.ReadSettings;
import io.gregor.spark.read.TopicPartition;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The read options, parsed once on the driver, named and interpreted as Spark's Kafka source
 * does (a port of options.py, with its defaults, precedence and messages), so that a job moves
 * between format("kafka") and format("gregor") by one word, and a mistake fails the query at
 * planning time with a message naming the option.
 */
public record SourceOptions(
    Map<String, String> clientConfig,
    Subscription subscription,
    OffsetBound starting,
    OffsetBound ending,
    boolean failIfNoTimestampMatch,
    boolean includeHeaders,
    boolean failOnDataLoss,
    Long maxOffsetsPerTrigger,
    Long minOffsetsPerTrigger,
    long maxTriggerDelayMs,
    Long minPartitions,
    Long maxRecordsPerPartition,
    int pollTimeoutMs,
    int fetchOffsetNumRetries,
    long fetchOffsetRetryIntervalMs,
    ReadSettings readSettings) {

  private static final String KAFKA_PREFIX = "kafka.";
  /** Spark's default for kafkaConsumer.pollTimeoutMs (spark.network.timeout). */
  private static final int DEFAULT_POLL_TIMEOUT_MS = 120_000;
  /** Spark's defaults for fetchOffset.numRetries and fetchOffset.retryIntervalMs. */
  private static final long DEFAULT_FETCH_OFFSET_RETRIES = 3;

  private static final long DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000;

  /**
   * Consumer settings Spark's Kafka source refuses, because the source, not the consumer,
   * decides what is read and how (KafkaSourceProvider's messages, in short).
   */
  private static final Map<String, String> REFUSED_CLIENT_CONFIG =
      Map.of(
          "auto.offset.reset",
          ": set the source option 'startingOffsets' to 'earliest' or 'latest' instead (it"
              + " applies when a query starts; a restarted query resumes from its checkpoint)",
          "key.deserializer",
          ": keys are read as bytes; deserialize them with DataFrame operations",
          "value.deserializer",
          ": values are read as bytes; deserialize them with DataFrame operations",
          "enable.auto.commit",
          ": the checkpoint, not a consumer group, holds a query's progress",
          "interceptor.classes",
          ": interceptors could change the records");

  /** The options that say what a query reads; a write never has them. */
  private static final List<String> SUBSCRIPTIONS = List.of("subscribe", "subscribePattern", "assign");

  /** Spark's default for maxTriggerDelay. */
  private static final String DEFAULT_MAX_TRIGGER_DELAY = "15m";
  /** Spark's time strings (JavaUtils.timeStringAsMs): a number and an optional unit. */
  private static final Pattern DURATION = Pattern.compile("\\s*(\\d+)\\s*([a-z]*)\\s*");

  private static final Map<String, Long> TIME_UNITS_MS =
      Map.of(
          "ms", 1L, "s", 1000L, "sec", 1000L, "m", 60_000L, "min", 60_000L, "h", 3_600_000L, "d",
          86_400_000L);

  /** Validate and interpret the read options of a batch or a streaming query. */
  public static SourceOptions parse(Map<String, String> options, boolean streaming) {
    return parse(options, Boolean.valueOf(streaming));
  }

  /**
   * What can be checked when a read's DataFrame is made (load()), before it is known whether
   * it will be read as a batch or a stream: Spark's Kafka source refuses bad options there,
   * not only when a query runs. Options without a subscription are a write's, left to the sink.
   */
  public static void validateOnLoad(Map<String, String> options) {
    for (String name : SUBSCRIPTIONS) {
      if (options.get(name) != null) {
        parse(options, null);
        return;
      }
    }
  }

  /** {@code streaming} null: either, so only what both kinds of query refuse is refused. */
  private static SourceOptions parse(Map<String, String> options, Boolean streaming) {
    boolean stream = Boolean.TRUE.equals(streaming);
    boolean batch = Boolean.FALSE.equals(streaming);
    if (stream) {
      for (String name : List.of("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")) {
        if (options.get(name) != null) {
          throw new IllegalArgumentException(
              "option " + PythonText.repr(name) + " is not valid for streaming queries");
        }
      }
    }
    OffsetBound starting =
        offsetBound(
            options,
            "starting",
            new EarliestOrLatest(stream ? OffsetBound.LATEST : OffsetBound.EARLIEST),
            batch ? OffsetBound.LATEST : null);
    OffsetBound ending =
        stream
            ? new EarliestOrLatest(OffsetBound.LATEST)
            : offsetBound(
                options,
                "ending",
                new EarliestOrLatest(OffsetBound.LATEST),
                batch ? OffsetBound.EARLIEST : null);
    String strategy =
        options.getOrDefault("startingOffsetsByTimestampStrategy", "error").toLowerCase(Locale.ROOT);
    if (!strategy.equals("error") && !strategy.equals("latest")) {
      throw new IllegalArgumentException(
          "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got "
              + PythonText.repr(strategy));
    }
    Map<String, String> clientConfig = clientConfig(options);
    Subscription subscription = subscription(options);
    boolean includeHeaders = bool(options, "includeHeaders", false);
    boolean failOnDataLoss = bool(options, "failOnDataLoss", true);
    Long maxOffsets = positive(options, "maxOffsetsPerTrigger");
    Long minOffsets = positive(options, "minOffsetsPerTrigger");
    long maxTriggerDelayMs = durationMs(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY);
    if (minOffsets != null && maxOffsets != null && minOffsets > maxOffsets) {
      throw new IllegalArgumentException(
          "option 'minOffsetsPerTrigger' ("
              + minOffsets
              + ") is higher than option 'maxOffsetsPerTrigger' ("
              + maxOffsets
              + ")");
    }
    Long minPartitions = positive(options, "minPartitions");
    Long maxRecordsPerPartition = positive(options, "maxRecordsPerPartition");
    Long retries = positive(options, "fetchOffset.numRetries");
    Long retryInterval = positive(options, "fetchOffset.retryIntervalMs");
    Long pollTimeout = positive(options, "kafkaConsumer.pollTimeoutMs");
    int pollTimeoutMs =
        pollTimeout == null ? DEFAULT_POLL_TIMEOUT_MS : (int) Math.min(pollTimeout, Integer.MAX_VALUE);
    return new SourceOptions(
        clientConfig,
        subscription,
        starting,
        ending,
        strategy.equals("error"),
        includeHeaders,
        failOnDataLoss,
        maxOffsets,
        minOffsets,
        maxTriggerDelayMs,
        minPartitions,
        maxRecordsPerPartition,
        pollTimeoutMs,
        (int) Math.min(retries == null ? DEFAULT_FETCH_OFFSET_RETRIES : retries, Integer.MAX_VALUE),
        retryInterval == null ? DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS : retryInterval,
        ReadSettings.fromOptions(clientConfig, includeHeaders, failOnDataLoss, pollTimeoutMs));
  }

  /**
   * Every kafka.-prefixed option with the prefix removed; bootstrap.servers is also accepted
   * unprefixed, because that is how every other Kafka client spells it.
   */
  static Map<String, String> clientConfig(Map<String, String> options) {
    Map<String, String> config = new TreeMap<>();
    for (Map.Entry<String, String> option : options.entrySet()) {
      if (option.getKey().toLowerCase(Locale.ROOT).startsWith(KAFKA_PREFIX)) {
        config.put(option.getKey().substring(KAFKA_PREFIX.length()), option.getValue());
      }
    }
    String plain = options.get("bootstrap.servers");
    if (!config.containsKey("bootstrap.servers") && plain != null && !plain.isEmpty()) {
      config.put("bootstrap.servers", plain);
    }
    String servers = config.get("bootstrap.servers");
    if (servers == null || servers.isEmpty()) {
      throw new IllegalArgumentException("option 'kafka.bootstrap.servers' is required");
    }
    for (Map.Entry<String, String> refused : new TreeMap<>(REFUSED_CLIENT_CONFIG).entrySet()) {
      if (config.containsKey(refused.getKey())) {
        throw new IllegalArgumentException(
            "Kafka option "
                + PythonText.repr(KAFKA_PREFIX + refused.getKey())
                + " is not supported"
                + refused.getValue());
      }
    }
    return config;
  }

  private static Subscription subscription(Map<String, String> options) {
    Map<String, String> given = new TreeMap<>();
    for (String name : SUBSCRIPTIONS) {
      if (options.get(name) != null) {
        given.put(name, options.get(name));
      }
    }
    if (given.size() != 1) {
      throw new IllegalArgumentException(
          "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given,"
              + " got "
              + (given.isEmpty() ? "none" : PythonText.repr(new ArrayList<>(given.keySet()))));
    }
    Map.Entry<String, String> only = given.entrySet().iterator().next();
    String value = only.getValue();
    switch (only.getKey()) {
      case "subscribe":
        Set<String> topics = new LinkedHashSet<>();
        for (String topic : value.split(",", -1)) {
          if (!topic.strip().isEmpty()) {
            topics.add(topic.strip());
          }
        }
        if (topics.isEmpty()) {
          throw new IllegalArgumentException("option 'subscribe' names no topic");
        }
        return new Subscription(Set.copyOf(topics), null, List.of());
      case "subscribePattern":
        if (value.strip().isEmpty()) {
          throw new IllegalArgumentException("option 'subscribePattern' names no pattern");
        }
        try {
          return new Subscription(Set.of(), Pattern.compile(value.strip()), List.of());
        } catch (PatternSyntaxException e) {
          throw new IllegalArgumentException(
              "option 'subscribePattern': invalid regex "
                  + PythonText.repr(value)
                  + ": "
                  + e.getDescription(),
              e);
        }
      default:
        return new Subscription(Set.of(), null, assignment(value));
    }
  }

  private static List<TopicPartition> assignment(String text) {
    List<TopicPartition> assigned = new ArrayList<>();
    try {
      JsonNode root = new ObjectMapper().readTree(text);
      if (root == null || !root.isObject()) {
        throw new IllegalArgumentException("not an object");
      }
      for (Map.Entry<String, JsonNode> topic : root.properties()) {
        if (!topic.getValue().isArray()) {
          throw new IllegalArgumentException("not a list");
        }
        for (JsonNode partition : topic.getValue()) {
          if (!partition.isIntegralNumber() || !partition.canConvertToInt()) {
            throw new IllegalArgumentException("not a partition number");
          }
          assigned.add(new TopicPartition(topic.getKey(), partition.intValue()));
        }
      }
    } catch (IllegalArgumentException | com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalArgumentException(
          "option 'assign' must look like {\"topic\": [0, 1]}, got " + PythonText.repr(text), e);
    }
    if (assigned.isEmpty()) {
      throw new IllegalArgumentException("option 'assign' names no partition");
    }
    return assigned;
  }

  /**
   * startingX/endingX with Spark's precedence: the global timestamp first, then per-partition
   * timestamps, then offsets. {@code forbidden} is the marker this side may not take in batch
   * queries (latest to start, earliest to end), or null.
   */
  private static OffsetBound offsetBound(
      Map<String, String> options, String side, OffsetBound fallback, Long forbidden) {
    String timestamp = options.get(side + "Timestamp");
    if (timestamp != null) {
      return new AtTimestamp(nonNegative(side + "Timestamp", timestamp));
    }
    String byTimestamp = options.get(side + "OffsetsByTimestamp");
    if (byTimestamp != null) {
      String name = side + "OffsetsByTimestamp";
      Map<TopicPartition, Long> timestamps = OffsetsJson.parseOption(byTimestamp, name);
      for (long value : timestamps.values()) {
        nonNegative(name, Long.toString(value));
      }
      return new SpecificTimestamps(timestamps);
    }
    String name = side + "Offsets";
    String text = options.get(name);
    if (text == null) {
      return fallback;
    }
    String word = text.strip().toLowerCase(Locale.ROOT);
    if (word.equals("earliest") || word.equals("latest")) {
      long marker = word.equals("earliest") ? OffsetBound.EARLIEST : OffsetBound.LATEST;
      if (forbidden != null && marker == forbidden) {
        throw new IllegalArgumentException(
            "option "
                + PythonText.repr(name)
                + ": "
                + PythonText.repr(word)
                + " is not valid for batch queries");
      }
      return new EarliestOrLatest(marker);
    }
    Map<TopicPartition, Long> offsets = OffsetsJson.parseOption(text, name);
    for (Map.Entry<TopicPartition, Long> entry : offsets.entrySet()) {
      long offset = entry.getValue();
      if (offset < OffsetBound.EARLIEST || (forbidden != null && offset == forbidden)) {
        TopicPartition tp = entry.getKey();
        throw new IllegalArgumentException(
            "option "
                + PythonText.repr(name)
                + ": offset "
                + offset
                + " for ("
                + PythonText.repr(tp.topic())
                + ", "
                + tp.partition()
                + ") is not valid here");
      }
    }
    return new SpecificOffsets(offsets);
  }

  private static boolean bool(Map<String, String> options, String name, boolean fallback) {
    String value = options.get(name);
    if (value == null) {
      return fallback;
    }
    String lowered = value.strip().toLowerCase(Locale.ROOT);
    if (!lowered.equals("true") && !lowered.equals("false")) {
      throw new IllegalArgumentException(
          "option "
              + PythonText.repr(name)
              + " must be 'true' or 'false', got "
              + PythonText.repr(value));
    }
    return lowered.equals("true");
  }

  private static Long positive(Map<String, String> options, String name) {
    String value = options.get(name);
    if (value == null) {
      return null;
    }
    long number;
    try {
      number = Long.parseLong(value.strip().replace("_", ""));
    } catch (NumberFormatException e) {
      number = 0;
    }
    if (number <= 0) {
      throw new IllegalArgumentException(
          "option "
              + PythonText.repr(name)
              + " must be a positive integer, got "
              + PythonText.repr(value));
    }
    return number;
  }

  /** A Spark time string such as 15m, 30s or 500 (milliseconds). */
  private static long durationMs(Map<String, String> options, String name, String fallback) {
    String value = options.get(name);
    if (value == null || value.isEmpty()) {
      value = fallback;
    }
    Matcher found = DURATION.matcher(value.toLowerCase(Locale.ROOT));
    if (!found.matches()
        || !(found.group(2).isEmpty() || TIME_UNITS_MS.containsKey(found.group(2)))) {
      throw new IllegalArgumentException(
          "option "
              + PythonText.repr(name)
              + " must be a duration such as 15m, 30s or 500ms, got "
              + PythonText.repr(value));
    }
    return Long.parseLong(found.group(1)) * TIME_UNITS_MS.getOrDefault(found.group(2), 1L);
  }

  private static long nonNegative(String name, String value) {
    long number;
    try {
      number = Long.parseLong(value.strip());
    } catch (NumberFormatException e) {
      number = -1;
    }
    if (number < 0) {
      throw new IllegalArgumentException(
          "option "
              + PythonText.repr(name)
              + " must be a timestamp in ms >= 0, got "
              + PythonText.repr(value));
    }
    return number;
  }
}
