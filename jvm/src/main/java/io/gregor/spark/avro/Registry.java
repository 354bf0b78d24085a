package io.gregor.spark.avro;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.avro.Schema;

/**
 * A schema registry's Confluent REST API as a decoder needs it: a schema by id, with the
 * schemas it references (by subject and version, recursively), in the order a parser must
 * see them.
 */
final class Registry {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Registry> AT = new ConcurrentHashMap<>();
  private static final Duration TIMEOUT = Duration.ofSeconds(30);

  private final String url;
  private final HttpClient http = HttpClient.newBuilder().connectTimeout(TIMEOUT).build();

  private Registry(String url) {
    this.url = url.endsWith("/") ? url.substring(0, url.length() - 1) : url;
  }

  static Registry at(String url) {
    return AT.computeIfAbsent(url, Registry::new);
  }

  /** The schema of {@code id} last, after every schema it references. */
  List<String> schemaTexts(int id) {
    List<String> texts = new ArrayList<>();
    JsonNode schema = get("/schemas/ids/" + id);
    addReferenced(schema.path("references"), texts, new HashSet<>());
    texts.add(schema.path("schema").asText());
    return texts;
  }

  private void addReferenced(JsonNode references, List<String> texts, Set<String> seen) {
    for (JsonNode reference : references) {
      String subject = reference.path("subject").asText();
      String key = subject + '\n' + reference.path("version").asText();
      if (!seen.add(key)) {
        continue;
      }
      JsonNode version = get("/subjects/" + URLEncoder.encode(subject, StandardCharsets.UTF_8)
          + "/versions/" + reference.path("version").asText());
      addReferenced(version.path("references"), texts, seen);
      texts.add(version.path("schema").asText());
    }
  }

  private JsonNode get(String path) {
    HttpRequest request = HttpRequest.newBuilder(URI.create(url + path)).timeout(TIMEOUT)
        .header("Accept", "application/vnd.schemaregistry.v1+json").GET().build();
    try {
      HttpResponse<String> answer = http.send(request, HttpResponse.BodyHandlers.ofString());
      if (answer.statusCode() != 200) {
        throw new IllegalStateException(
            "schema registry " + url + path + " answered " + answer.statusCode() + ": "
                + answer.body());
      }
      return JSON.readTree(answer.body());
    } catch (IOException e) {
      throw new UncheckedIOException("schema registry " + url + path, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted asking " + url + path, e);
    }
  }

  /** The last of {@code texts}, parsed after the ones it references. */
  static Schema parse(List<String> texts) {
    Schema.Parser parser = new Schema.Parser();
    Schema last = null;
    for (String text : texts) {
      last = parser.parse(text);
    }
    if (last == null) {
      throw new IllegalArgumentException("no schema given");
    }
    return last;
  }

  /** A JSON array of schema texts. */
  static List<String> texts(String json) {
    List<String> texts = new ArrayList<>();
    try {
      for (JsonNode text : JSON.readTree(json)) {
        texts.add(text.asText());
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("not a JSON array of schema texts: " + json, e);
    }
    return texts;
  }
}
