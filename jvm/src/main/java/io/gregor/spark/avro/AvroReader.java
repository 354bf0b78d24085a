package io.gregor.spark.avro;

import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Reads one Avro value (of a writer schema, resolved into a reader schema) from an
 * {@link AvroInput} as Spark's internal value of the reader schema's column type: an
 * {@code InternalRow} for a record, {@code UTF8String} for a string or enum, {@code Decimal},
 * days and microseconds for dates and timestamps, {@code ArrayData} and {@code MapData}; built
 * once per pair of schemas by {@link AvroReaders}.
 */
interface AvroReader {
  Object read(AvroInput in);

  /** The value read into field {@code ordinal} of {@code row}; primitives without boxing. */
  default void readInto(AvroInput in, InternalRow row, int ordinal) {
    Object value = read(in);
    if (value == null) {
      row.setNullAt(ordinal);
    } else {
      row.update(ordinal, value);
    }
  }
}
