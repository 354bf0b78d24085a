package io.gregor.spark.avro;

import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;
import org.apache.spark.sql.RowFactory;

/**
 * An Avro datum (as Avro's generic reader gives it) as the external value of its Spark column
 * type, the same types Python's {@code spark_type} derives: records become rows, strings and
 * enums strings, a union with null its other branch, date and timestamps Spark's dates and
 * instants, decimals BigDecimal.
 */
interface AvroToRow extends Serializable {
  Object convert(Object datum);

  static AvroToRow of(Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical instanceof LogicalTypes.Decimal decimal) {
      int scale = decimal.getScale();
      return datum -> datum == null ? null : new BigDecimal(new BigInteger(bytes(datum)), scale);
    }
    if (logical instanceof LogicalTypes.Date) {
      return datum -> datum == null ? null : LocalDate.ofEpochDay((Integer) datum);
    }
    if (logical instanceof LogicalTypes.TimestampMillis) {
      return datum -> datum == null ? null : Instant.ofEpochMilli((Long) datum);
    }
    if (logical instanceof LogicalTypes.TimestampMicros) {
      return datum -> {
        if (datum == null) {
          return null;
        }
        long micros = (Long) datum;
        return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
            Math.floorMod(micros, 1_000_000L) * 1_000L);
      };
    }
    switch (schema.getType()) {
      case RECORD:
        return record(schema);
      case UNION:
        return of(NullableUnion.valueBranch(schema));
      case STRING:
      case ENUM:
        return datum -> datum == null ? null : datum.toString();
      case BYTES:
      case FIXED:
        return datum -> datum == null ? null : bytes(datum);
      case ARRAY:
        AvroToRow items = of(schema.getElementType());
        return datum -> {
          if (datum == null) {
            return null;
          }
          Collection<?> values = (Collection<?>) datum;
          List<Object> converted = new ArrayList<>(values.size());
          for (Object value : values) {
            converted.add(items.convert(value));
          }
          return converted;
        };
      case MAP:
        AvroToRow mapValues = of(schema.getValueType());
        return datum -> {
          if (datum == null) {
            return null;
          }
          Map<?, ?> entries = (Map<?, ?>) datum;
          Map<String, Object> converted = new HashMap<>(entries.size() * 2);
          for (Map.Entry<?, ?> entry : entries.entrySet()) {
            converted.put(entry.getKey().toString(), mapValues.convert(entry.getValue()));
          }
          return converted;
        };
      default:
        // null, boolean, int, long, float, double: Avro's boxed values are Spark's.
        return datum -> datum;
    }
  }

  private static AvroToRow record(Schema schema) {
    List<Schema.Field> fields = schema.getFields();
    AvroToRow[] converters = new AvroToRow[fields.size()];
    for (int i = 0; i < converters.length; i++) {
      converters[i] = of(fields.get(i).schema());
    }
    return datum -> {
      if (datum == null) {
        return null;
      }
      IndexedRecord record = (IndexedRecord) datum;
      Object[] values = new Object[converters.length];
      for (int i = 0; i < values.length; i++) {
        values[i] = converters[i].convert(record.get(i));
      }
      return RowFactory.create(values);
    };
  }

  private static byte[] bytes(Object datum) {
    if (datum instanceof GenericFixed fixed) {
      return fixed.bytes();
    }
    ByteBuffer buffer = ((ByteBuffer) datum).duplicate();
    byte[] copy = new byte[buffer.remaining()];
    buffer.get(copy);
    return copy;
  }
}
