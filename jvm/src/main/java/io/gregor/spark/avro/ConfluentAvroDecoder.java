package io.gregor.spark.avro;

import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * Values in Confluent's framing (magic byte 0, 4-byte big-endian schema id, Avro binary) as
 * rows in the shape of a reader schema: the work of {@link FromConfluentAvro}, the expression
 * behind Python's {@code gregor.spark.confluent_avro.from_confluent_avro} when the session has
 * this jar.
 *
 * <p>Each value is read with its writer's schema, found in the registry by the id in its header
 * (once per id and JVM), and resolved into the reader schema by Apache Avro's own resolution
 * ({@link AvroReaders}), as the specification defines it: fields the writer lacked take their
 * defaults. The reader of each (writer id, reader schema) is built once per JVM and reads the
 * value's bytes straight into Spark's internal row, strings as views of the value: no Avro
 * record, no external {@code Row} converted again, no schema or registry lookup per value
 * beyond comparing the id with the last one's.
 *
 * <p>The reader schema is a JSON array of schema texts, the schemas it references first
 * (dependencies before dependents) and itself last. A null value, or one not in the framing,
 * gives a null row; a framed value that is not Avro of its schema fails the task, as Spark's
 * own {@code from_avro} does by default.
 *
 * <p>One instance belongs to one task's copy of the plan (one thread): the row it returns is
 * the same object every call, as Spark's {@code from_avro} returns its own (whoever keeps a row
 * copies it).
 */
public final class ConfluentAvroDecoder implements Serializable {
  private static final Map<Key, Reading> READINGS = new ConcurrentHashMap<>();
  private static final int HEADER = 5;

  private final Key key;
  private final StructType rowType;

  private transient Reading reading;
  private transient int lastId;
  private transient AvroReaders.RecordReader lastReader;
  private transient InternalRow row;

  public ConfluentAvroDecoder(String registryUrl, String readerTexts, StructType rowType) {
    this.key = new Key(registryUrl, readerTexts);
    this.rowType = rowType;
  }

  StructType rowType() {
    return rowType;
  }

  /** The row of a framed value, or null. */
  public InternalRow decode(byte[] value) {
    if (value == null || value.length < HEADER || value[0] != 0) {
      return null;
    }
    int schemaId = (value[1] & 0xff) << 24 | (value[2] & 0xff) << 16 | (value[3] & 0xff) << 8
        | (value[4] & 0xff);
    AvroReaders.RecordReader reader = lastReader;
    if (reader == null || schemaId != lastId) {
      if (reading == null) {
        reading = READINGS.computeIfAbsent(key, Reading::new);
        row = new SpecificInternalRow(rowType);
      }
      reader = reading.reader(schemaId);
      lastId = schemaId;
      lastReader = reader;
    }
    reader.readFields(new AvroInput(value, HEADER, value.length), row);
    return row;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ConfluentAvroDecoder decoder && key.equals(decoder.key)
        && rowType.equals(decoder.rowType);
  }

  @Override
  public int hashCode() {
    return Objects.hash(key, rowType);
  }

  /** A registry and a reader schema. */
  private record Key(String registryUrl, String readerTexts) implements Serializable {}

  /** What reading into one reader schema needs: a reader per writer id. */
  private static final class Reading {
    private final Registry registry;
    private final Schema readerSchema;
    private final Map<Integer, AvroReaders.RecordReader> readers = new ConcurrentHashMap<>();

    Reading(Key key) {
      this.registry = Registry.at(key.registryUrl());
      this.readerSchema = Registry.parse(Registry.texts(key.readerTexts()));
    }

    AvroReaders.RecordReader reader(int schemaId) {
      return readers.computeIfAbsent(schemaId, id -> {
        List<String> texts = registry.schemaTexts(id);
        return AvroReaders.record(Registry.parse(texts), readerSchema);
      });
    }
  }
}
