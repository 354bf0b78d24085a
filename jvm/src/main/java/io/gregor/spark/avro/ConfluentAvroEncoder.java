package io.gregor.spark.avro;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;

/**
 * Struct values as Avro binary in Confluent's framing (magic byte 0, 4-byte big-endian schema
 * id, Avro binary): Spark's SQL function behind Python's
 * {@code gregor.spark.confluent_avro.to_confluent_avro} when the session has this jar, the
 * twin of {@link ConfluentAvroDecoder}. Apache Avro's generic writer writes each row, converted
 * by {@link RowToAvro}, with the subject's latest schema; no record goes through Python.
 *
 * <p>Arguments: the struct, the writer schema as a JSON array of schema texts (the schemas it
 * references first, itself last) and the 5-byte header, both binary literals, so that the
 * writing they name is found by the array's identity rather than by hashing text per row. A
 * null struct gives a null value.
 */
public final class ConfluentAvroEncoder implements UDF3<Row, byte[], byte[], byte[]> {
  private static final Map<String, Writing> WRITINGS = new ConcurrentHashMap<>();

  /** The writing of the last call's writer texts, and this instance's buffers (one task's). */
  private transient byte[] lastTexts;
  private transient Writing lastWriting;
  private transient ByteArrayOutputStream out;
  private transient BinaryEncoder encoder;

  @Override
  public byte[] call(Row row, byte[] writerTexts, byte[] header) throws Exception {
    if (row == null) {
      return null;
    }
    Writing writing = lastWriting;
    if (writerTexts != lastTexts || writing == null) {
      String texts = new String(writerTexts, StandardCharsets.UTF_8);
      writing = WRITINGS.computeIfAbsent(texts, Writing::new);
      lastTexts = writerTexts;
      lastWriting = writing;
    }
    if (out == null) {
      out = new ByteArrayOutputStream(256);
    }
    out.reset();
    out.write(header);
    encoder = EncoderFactory.get().binaryEncoder(out, encoder);
    writing.writer.write(writing.converter.convert(row), encoder);
    encoder.flush();
    return out.toByteArray();
  }

  /** What writing with one schema needs. */
  private static final class Writing {
    private final GenericDatumWriter<Object> writer;
    private final RowToAvro converter;

    Writing(String writerTexts) {
      Schema schema = Registry.parse(Registry.texts(writerTexts));
      this.writer = new GenericDatumWriter<>(schema);
      this.converter = RowToAvro.of(schema);
    }
  }
}
