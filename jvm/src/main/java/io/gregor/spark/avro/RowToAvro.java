package io.gregor.spark.avro;

import java.io.Serializable;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.Conversions;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.spark.sql.Row;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Spark column's external value as the Avro datum of a writer schema, for Apache Avro's
 * generic writer: the inverse of {@link AvroReaders}. Rows become records (their fields found by
 * name when the row knows its schema, else by position), strings enums where the schema says
 * so, byte arrays bytes or fixed, Spark's dates and timestamps (java.time or java.sql) days and
 * milli- or microseconds, BigDecimal the decimal's unscaled bytes, Scala sequences and maps
 * Java ones; numbers are narrowed or widened to the schema's type, as fastavro accepts them.
 */
interface RowToAvro extends Serializable {
  Object convert(Object value);

  static RowToAvro of(Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical instanceof LogicalTypes.Decimal) {
      Conversions.DecimalConversion decimals = new Conversions.DecimalConversion();
      if (schema.getType() == Schema.Type.FIXED) {
        return value -> value == null ? null
            : decimals.toFixed(scaled((BigDecimal) value, logical), schema, logical);
      }
      return value -> value == null ? null
          : decimals.toBytes(scaled((BigDecimal) value, logical), schema, logical);
    }
    if (logical instanceof LogicalTypes.Date) {
      return value -> value == null ? null : (int) day(value).toEpochDay();
    }
    if (logical instanceof LogicalTypes.TimestampMillis) {
      return value -> value == null ? null : instant(value).toEpochMilli();
    }
    if (logical instanceof LogicalTypes.TimestampMicros) {
      return value -> {
        if (value == null) {
          return null;
        }
        Instant at = instant(value);
        return Math.addExact(Math.multiplyExact(at.getEpochSecond(), 1_000_000L),
            at.getNano() / 1_000L);
      };
    }
    switch (schema.getType()) {
      case RECORD:
        return record(schema);
      case UNION:
        return of(NullableUnion.valueBranch(schema));
      case ENUM:
        return value -> value == null ? null : new GenericData.EnumSymbol(schema, value.toString());
      case FIXED:
        return value -> value == null ? null : new GenericData.Fixed(schema, (byte[]) value);
      case BYTES:
        return value -> value == null ? null : ByteBuffer.wrap((byte[]) value);
      case STRING:
        return value -> value == null ? null : value.toString();
      case INT:
        return value -> value == null ? null : ((Number) value).intValue();
      case LONG:
        return value -> value == null ? null : ((Number) value).longValue();
      case FLOAT:
        return value -> value == null ? null : ((Number) value).floatValue();
      case DOUBLE:
        return value -> value == null ? null : ((Number) value).doubleValue();
      case ARRAY:
        RowToAvro items = of(schema.getElementType());
        return value -> {
          if (value == null) {
            return null;
          }
          Collection<?> values = value instanceof scala.collection.Iterable<?> scala
              ? CollectionConverters.asJavaCollection(scala) : (Collection<?>) value;
          List<Object> converted = new ArrayList<>(values.size());
          for (Object item : values) {
            converted.add(items.convert(item));
          }
          return converted;
        };
      case MAP:
        RowToAvro mapValues = of(schema.getValueType());
        return value -> {
          if (value == null) {
            return null;
          }
          Map<?, ?> entries = value instanceof scala.collection.Map<?, ?> scala
              ? CollectionConverters.asJava(scala) : (Map<?, ?>) value;
          Map<String, Object> converted = new HashMap<>(entries.size() * 2);
          for (Map.Entry<?, ?> entry : entries.entrySet()) {
            converted.put(entry.getKey().toString(), mapValues.convert(entry.getValue()));
          }
          return converted;
        };
      default:
        // null and boolean: Spark's values are Avro's.
        return value -> value;
    }
  }

  private static RowToAvro record(Schema schema) {
    List<Schema.Field> fields = schema.getFields();
    RowToAvro[] converters = new RowToAvro[fields.size()];
    String[] names = new String[fields.size()];
    for (int i = 0; i < converters.length; i++) {
      converters[i] = of(fields.get(i).schema());
      names[i] = fields.get(i).name();
    }
    return value -> {
      if (value == null) {
        return null;
      }
      Row row = (Row) value;
      GenericData.Record record = new GenericData.Record(schema);
      for (int i = 0; i < converters.length; i++) {
        int at = row.schema() == null ? i : row.fieldIndex(names[i]);
        record.put(i, converters[i].convert(row.get(at)));
      }
      return record;
    };
  }

  private static BigDecimal scaled(BigDecimal value, LogicalType logical) {
    return value.setScale(((LogicalTypes.Decimal) logical).getScale(),
        java.math.RoundingMode.UNNECESSARY);
  }

  private static LocalDate day(Object value) {
    return value instanceof LocalDate day ? day : ((java.sql.Date) value).toLocalDate();
  }

  private static Instant instant(Object value) {
    return value instanceof Instant at ? at : ((Timestamp) value).toInstant();
  }
}
