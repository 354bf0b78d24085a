package io.gregor.spark.avro;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;

/**
 * Values in Confluent's framing (magic byte 0, 4-byte big-endian schema id, Avro binary) as
 * rows in the shape of a reader schema: Spark's SQL function behind Python's
 * {@code gregor.spark.confluent_avro.from_confluent_avro} when the session has this jar.
 *
 * <p>Each value is read with its writer's schema, found in the registry by the id in its header
 * (once per id and JVM), and resolved into the reader schema by Apache Avro's own resolution,
 * as the specification defines it: fields the writer lacked take their defaults. Decoding in the
 * JVM keeps records out of Python altogether (no Arrow batches to a Python worker and back);
 * fastavro in a Python UDF read several times fewer records per second than the source gave.
 *
 * <p>Arguments: the value, the registry's URL, and the reader schema as a JSON array of schema
 * texts, the schemas it references first (dependencies before dependents) and itself last, both
 * UTF-8 in binary literals: Spark hands a UDF's string arguments over as new Strings for every
 * row, but a binary literal as the same array, so the reading they name is found by identity
 * (decoding and hashing the schema's text for every row cost more than decoding the value). A
 * null value, or one not in the framing, gives a null row.
 */
public final class ConfluentAvroDecoder implements UDF3<byte[], byte[], byte[], Row> {
  private static final Map<String, Reading> READINGS = new ConcurrentHashMap<>();
  private static final ThreadLocal<BinaryDecoder> DECODERS = new ThreadLocal<>();
  private static final int HEADER = 5;

  /** The reading of the last call's reader texts (this instance is one task's). */
  private transient byte[] lastTexts;
  private transient Reading lastReading;

  @Override
  public Row call(byte[] value, byte[] registryUrl, byte[] readerTexts) throws Exception {
    if (value == null || value.length < HEADER || value[0] != 0) {
      return null;
    }
    Reading reading = lastReading;
    if (readerTexts != lastTexts || reading == null) {
      String url = new String(registryUrl, StandardCharsets.UTF_8);
      String texts = new String(readerTexts, StandardCharsets.UTF_8);
      reading = READINGS.computeIfAbsent(url + '\n' + texts, key -> new Reading(url, texts));
      lastTexts = readerTexts;
      lastReading = reading;
    }
    int schemaId = ByteBuffer.wrap(value, 1, 4).getInt();
    BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(
        value, HEADER, value.length - HEADER, DECODERS.get());
    DECODERS.set(decoder);
    Object record = reading.reader(schemaId).read(null, decoder);
    return (Row) reading.converter.convert(record);
  }

  /** What reading into one reader schema needs: a datum reader per writer id. */
  private static final class Reading {
    private final Registry registry;
    private final Schema readerSchema;
    private final AvroToRow converter;
    private final Map<Integer, GenericDatumReader<Object>> readers = new ConcurrentHashMap<>();

    Reading(String registryUrl, String readerTexts) {
      this.registry = Registry.at(registryUrl);
      this.readerSchema = Registry.parse(Registry.texts(readerTexts));
      this.converter = AvroToRow.of(readerSchema);
    }

    GenericDatumReader<Object> reader(int schemaId) {
      return readers.computeIfAbsent(schemaId, id -> {
        List<String> texts = registry.schemaTexts(id);
        return new GenericDatumReader<>(Registry.parse(texts), readerSchema);
      });
    }
  }
}
