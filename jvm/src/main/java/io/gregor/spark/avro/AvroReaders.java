package io.gregor.spark.avro;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.AvroTypeException;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Resolver;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The {@link AvroReader} of a writer schema resolved into a reader schema, built once from
 * Apache Avro's own resolution ({@link Resolver#resolve}: the specification's rules for
 * reordered, added and removed fields, defaults, promotions, unions and enums), so that
 * reading a value walks a tree of small readers with nothing left to decide per value. The
 * values are those of the reader schema's Spark type, the one Python's {@code spark_type}
 * derives: records are rows, strings and enums strings, a union with null its other branch,
 * date days, timestamp-millis and -micros microseconds, decimals Spark's decimals.
 */
final class AvroReaders {
  private AvroReaders() {}

  /** The reader of values written with {@code writer}, read as {@code reader} (a record). */
  static RecordReader record(Schema writer, Schema reader) {
    Resolver.Action action = Resolver.resolve(writer, reader);
    if (action.type == Resolver.Action.Type.ERROR) {
      throw new AvroTypeException(action.toString());
    }
    if (!(new Builder().of(action) instanceof RecordReader record)) {
      throw new AvroTypeException("values of " + writer + " cannot be read as " + reader);
    }
    return record;
  }

  /** Reads a record's fields into a row: its own (nested records) or one it is given. */
  static final class RecordReader implements AvroReader {
    /** Per writer field: where it goes in the row, or -1 for a field the reader lacks. */
    private int[] ordinals;
    private AvroReader[] readers;
    private AvroSkipper[] skippers;
    /** The reader's fields the writer lacked, and their defaults as Spark values. */
    private int[] defaultOrdinals;
    private Object[] defaults;
    private int width;

    @Override
    public Object read(AvroInput in) {
      GenericInternalRow row = new GenericInternalRow(width);
      readFields(in, row);
      return row;
    }

    /** Every field of {@code row} set, from the value or from its default. */
    void readFields(AvroInput in, InternalRow row) {
      for (int i = 0; i < ordinals.length; i++) {
        int ordinal = ordinals[i];
        if (ordinal < 0) {
          skippers[i].skip(in);
        } else {
          readers[i].readInto(in, row, ordinal);
        }
      }
      for (int i = 0; i < defaultOrdinals.length; i++) {
        if (defaults[i] == null) {
          row.setNullAt(defaultOrdinals[i]);
        } else {
          row.update(defaultOrdinals[i], defaults[i]);
        }
      }
    }
  }

  private static final class Builder {
    /** Each record's reader, made before its fields so that a recursive schema ends. */
    private final Map<Resolver.Action, RecordReader> records = new IdentityHashMap<>();

    AvroReader of(Resolver.Action action) {
      switch (action.type) {
        case DO_NOTHING:
        case PROMOTE:
          return primitive(action.writer.getType(), action.reader);
        case ENUM:
          return enumeration((Resolver.EnumAdjust) action);
        case CONTAINER:
          AvroReader items = of(((Resolver.Container) action).elementAction);
          return action.reader.getType() == Schema.Type.ARRAY ? array(items) : map(items);
        case RECORD:
          return record((Resolver.RecordAdjust) action);
        case WRITER_UNION:
          Resolver.Action[] branches = ((Resolver.WriterUnion) action).actions;
          AvroReader[] readers = new AvroReader[branches.length];
          for (int i = 0; i < readers.length; i++) {
            readers[i] = of(branches[i]);
          }
          return new WriterUnion(readers);
        case READER_UNION:
          // A union's value in Spark is its branch's (the only other branch is null).
          return of(((Resolver.ReaderUnion) action).actualAction);
        case ERROR:
          String message = action.toString();
          return in -> {
            throw new AvroTypeException(message);
          };
        default:
          throw new IllegalArgumentException("no reader for Avro's action " + action.type);
      }
    }

    private RecordReader record(Resolver.RecordAdjust action) {
      RecordReader record = records.get(action);
      if (record != null) {
        return record;
      }
      record = new RecordReader();
      records.put(action, record);
      int fields = action.fieldActions.length;
      record.ordinals = new int[fields];
      record.readers = new AvroReader[fields];
      record.skippers = new AvroSkipper[fields];
      int read = 0;
      for (int i = 0; i < fields; i++) {
        Resolver.Action field = action.fieldActions[i];
        if (field.type == Resolver.Action.Type.SKIP) {
          record.ordinals[i] = -1;
          record.skippers[i] = AvroSkipper.of(field.writer);
        } else {
          record.ordinals[i] = action.readerOrder[read++].pos();
          record.readers[i] = of(field);
        }
      }
      int defaults = action.readerOrder.length - action.firstDefault;
      record.defaultOrdinals = new int[defaults];
      record.defaults = new Object[defaults];
      for (int i = 0; i < defaults; i++) {
        Schema.Field field = action.readerOrder[action.firstDefault + i];
        record.defaultOrdinals[i] = field.pos();
        record.defaults[i] = sparkValue(field.schema(), action.defaults[i]);
      }
      record.width = action.reader.getFields().size();
      return record;
    }

    /** A default (Avro's generic datum) as its Spark value: written, then read back. */
    private Object sparkValue(Schema schema, Object datum) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
      try {
        new GenericDatumWriter<>(schema).write(datum, encoder);
        encoder.flush();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      byte[] bytes = out.toByteArray();
      return new Builder().of(Resolver.resolve(schema, schema))
          .read(new AvroInput(bytes, 0, bytes.length));
    }
  }

  /**
   * A primitive written as {@code written} (the same type, or one Avro promotes: int and long
   * share their encoding, and so do string and bytes) read as {@code reader}.
   */
  private static AvroReader primitive(Schema.Type written, Schema reader) {
    LogicalType logical = reader.getLogicalType();
    switch (reader.getType()) {
      case NULL:
        return in -> null;
      case BOOLEAN:
        return new BooleanReader();
      case INT:
        return new IntReader();
      case LONG:
        return logical instanceof LogicalTypes.TimestampMillis ? new MillisReader()
            : new LongReader();
      case FLOAT:
        return written == Schema.Type.FLOAT ? new FloatReader() : new IntegralAsFloatReader();
      case DOUBLE:
        switch (written) {
          case DOUBLE:
            return new DoubleReader();
          case FLOAT:
            return new FloatAsDoubleReader();
          default:
            return new IntegralAsDoubleReader();
        }
      case STRING:
        return AvroInput::readString;
      case BYTES:
        if (logical instanceof LogicalTypes.Decimal decimal) {
          return in -> decimal(in, in.readLength(), decimal);
        }
        return in -> in.copy(in.readLength());
      case FIXED:
        int size = reader.getFixedSize();
        if (logical instanceof LogicalTypes.Decimal decimal) {
          return in -> decimal(in, size, decimal);
        }
        return in -> in.copy(size);
      default:
        throw new IllegalArgumentException("not a primitive Avro type: " + reader);
    }
  }

  /** The decimal of the next {@code length} bytes (its unscaled value, big-endian). */
  private static Decimal decimal(AvroInput in, int length, LogicalTypes.Decimal type) {
    int precision = type.getPrecision();
    int scale = type.getScale();
    byte[] bytes = in.bytes;
    int at = in.position;
    in.skip(length);
    if (length <= 8 && precision <= Decimal.MAX_LONG_DIGITS()) {
      long unscaled = length == 0 ? 0 : bytes[at];
      for (int i = 1; i < length; i++) {
        unscaled = (unscaled << 8) | (bytes[at + i] & 0xff);
      }
      return Decimal.apply(unscaled, precision, scale);
    }
    return Decimal.apply(new BigDecimal(new BigInteger(bytes, at, length), scale), precision,
        scale);
  }

  private static AvroReader enumeration(Resolver.EnumAdjust action) {
    List<String> symbols = action.reader.getEnumSymbols();
    UTF8String[] read = new UTF8String[action.adjustments.length];
    for (int i = 0; i < read.length; i++) {
      int index = action.adjustments[i];
      read[i] = index < 0 ? null : UTF8String.fromString(symbols.get(index));
    }
    List<String> written = action.writer.getEnumSymbols();
    return in -> {
      int index = in.readInt();
      if (index < 0 || index >= read.length || read[index] == null) {
        throw new AvroTypeException("enum symbol " + (index >= 0 && index < written.size()
            ? written.get(index) : "#" + index) + " is not in " + action.reader.getFullName());
      }
      return read[index];
    };
  }

  private static AvroReader array(AvroReader items) {
    return in -> new GenericArrayData(blocks(in, items, null));
  }

  private static AvroReader map(AvroReader values) {
    return in -> {
      Object[][] keys = new Object[1][];
      Object[] read = blocks(in, values, keys);
      return new ArrayBasedMapData(new GenericArrayData(keys[0]), new GenericArrayData(read));
    };
  }

  /**
   * An array's or map's items, read block by block (a count, negative when its byte size
   * follows, then the items, until a count of 0); a map's keys into {@code keys[0]}.
   */
  private static Object[] blocks(AvroInput in, AvroReader item, Object[][] keys) {
    Object[] items = new Object[0];
    Object[] names = keys == null ? null : new Object[0];
    int size = 0;
    for (long count = in.readLong(); count != 0; count = in.readLong()) {
      if (count < 0) {
        count = -count;
        in.readLong();
      }
      if (count > Integer.MAX_VALUE - 8 - size) {
        throw new IllegalArgumentException("an Avro block of " + count + " items");
      }
      int end = size + (int) count;
      items = Arrays.copyOf(items, end);
      if (names != null) {
        names = Arrays.copyOf(names, end);
      }
      for (; size < end; size++) {
        if (names != null) {
          names[size] = in.readString();
        }
        items[size] = item.read(in);
      }
    }
    if (keys != null) {
      keys[0] = names;
    }
    return items;
  }

  /** A writer's union: the branch its index names, read as that branch resolves. */
  private record WriterUnion(AvroReader[] branches) implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return branch(in).read(in);
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      branch(in).readInto(in, row, ordinal);
    }

    private AvroReader branch(AvroInput in) {
      int index = in.readInt();
      if (index < 0 || index >= branches.length) {
        throw new AvroTypeException("union branch " + index + " of " + branches.length);
      }
      return branches[index];
    }
  }

  private static final class BooleanReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return in.readBoolean();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setBoolean(ordinal, in.readBoolean());
    }
  }

  private static final class IntReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return in.readInt();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setInt(ordinal, in.readInt());
    }
  }

  private static final class LongReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return in.readLong();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setLong(ordinal, in.readLong());
    }
  }

  /** timestamp-millis as Spark's timestamps, microseconds. */
  private static final class MillisReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return Math.multiplyExact(in.readLong(), 1000L);
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setLong(ordinal, Math.multiplyExact(in.readLong(), 1000L));
    }
  }

  private static final class FloatReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return in.readFloat();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setFloat(ordinal, in.readFloat());
    }
  }

  private static final class IntegralAsFloatReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return (float) in.readLong();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setFloat(ordinal, (float) in.readLong());
    }
  }

  private static final class DoubleReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return in.readDouble();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setDouble(ordinal, in.readDouble());
    }
  }

  private static final class FloatAsDoubleReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return (double) in.readFloat();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setDouble(ordinal, in.readFloat());
    }
  }

  private static final class IntegralAsDoubleReader implements AvroReader {
    @Override
    public Object read(AvroInput in) {
      return (double) in.readLong();
    }

    @Override
    public void readInto(AvroInput in, InternalRow row, int ordinal) {
      row.setDouble(ordinal, (double) in.readLong());
    }
  }
}
