package io.gregor.spark.plan;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.gregor.spark.read.TopicPartition;
import java.util.Map;
import java.util.TreeMap;

/**
 * Offset maps as JSON: {"topic": {"0": 42}}, the shape of Spark's Kafka source and of the Python
 * source (offsets.py). Spark decides whether a micro-batch has new data by comparing this text,
 * and a checkpoint written by one path of the source must be read by the other, so the text is
 * exactly Python's json.dumps of the same map: topics by name, partitions by number.
 */
public final class OffsetsJson {
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private OffsetsJson() {}

  public static String write(Map<TopicPartition, Long> offsets) {
    StringBuilder out = new StringBuilder("{");
    String topic = null;
    for (Map.Entry<TopicPartition, Long> entry : new TreeMap<>(offsets).entrySet()) {
      TopicPartition tp = entry.getKey();
      if (!tp.topic().equals(topic)) {
        if (topic != null) {
          out.append("}, ");
        }
        topic = tp.topic();
        quote(out, topic).append(": {");
      } else {
        out.append(", ");
      }
      out.append('"').append(tp.partition()).append("\": ").append(entry.getValue());
    }
    return out.append(topic == null ? "}" : "}}").toString();
  }

  /** The offsets of a checkpoint or an option; a malformed shape fails with what is wrong. */
  public static Map<TopicPartition, Long> read(String json) {
    JsonNode root;
    try {
      root = MAPPER.readTree(json);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException(e.getOriginalMessage(), e);
    }
    return fromTree(root);
  }

  /** A per-partition option such as {"t": {"0": 23, "1": -2}}. */
  static Map<TopicPartition, Long> parseOption(String text, String option) {
    try {
      return read(text);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "option "
              + PythonText.repr(option)
              + ": invalid per-partition JSON "
              + PythonText.repr(text)
              + ": "
              + e.getMessage(),
          e);
    }
  }

  private static Map<TopicPartition, Long> fromTree(JsonNode root) {
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException("expected a JSON object of topics, got " + root);
    }
    Map<TopicPartition, Long> offsets = new TreeMap<>();
    for (Map.Entry<String, JsonNode> topic : root.properties()) {
      if (!topic.getValue().isObject()) {
        throw new IllegalArgumentException(
            "expected a JSON object of partitions for topic " + PythonText.repr(topic.getKey()));
      }
      for (Map.Entry<String, JsonNode> partition : topic.getValue().properties()) {
        JsonNode value = partition.getValue();
        if (!value.isIntegralNumber() || !value.canConvertToLong()) {
          throw new IllegalArgumentException(
              "offset for "
                  + topic.getKey()
                  + "-"
                  + partition.getKey()
                  + " must be an integer: "
                  + value);
        }
        offsets.put(
            new TopicPartition(topic.getKey(), partitionNumber(partition.getKey())),
            value.longValue());
      }
    }
    return offsets;
  }

  private static int partitionNumber(String key) {
    try {
      return Integer.parseInt(key.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          "invalid literal for int() with base 10: " + PythonText.repr(key), e);
    }
  }

  private static StringBuilder quote(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20 || c > 0x7e) {
        out.append(String.format("\\u%04x", (int) c)); // json.dumps' ensure_ascii
      } else {
        out.append(c);
      }
    }
    return out.append('"');
  }
}
