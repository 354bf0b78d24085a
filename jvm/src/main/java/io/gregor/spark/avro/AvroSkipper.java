package io.gregor.spark.avro;

import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.Schema;

/**
 * Moves past one value of a writer schema that the reader does not read (a field the reader's
 * record lacks), without building it: what Avro's resolution calls skipping.
 */
interface AvroSkipper {
  void skip(AvroInput in);

  static AvroSkipper of(Schema writer) {
    return of(writer, new IdentityHashMap<>());
  }

  /** {@code records}: each record's field skippers, so that a recursive schema ends. */
  private static AvroSkipper of(Schema writer, Map<Schema, AvroSkipper[]> records) {
    switch (writer.getType()) {
      case NULL:
        return in -> { };
      case BOOLEAN:
        return in -> in.skip(1);
      case INT:
      case LONG:
      case ENUM:
        return AvroInput::readLong;
      case FLOAT:
        return in -> in.skip(4);
      case DOUBLE:
        return in -> in.skip(8);
      case STRING:
      case BYTES:
        return in -> in.skip(in.readLength());
      case FIXED:
        int size = writer.getFixedSize();
        return in -> in.skip(size);
      case ARRAY:
        return blocks(of(writer.getElementType(), records));
      case MAP:
        AvroSkipper value = of(writer.getValueType(), records);
        return blocks(in -> {
          in.skip(in.readLength());
          value.skip(in);
        });
      case UNION:
        List<Schema> branches = writer.getTypes();
        AvroSkipper[] skippers = new AvroSkipper[branches.size()];
        for (int i = 0; i < skippers.length; i++) {
          skippers[i] = of(branches.get(i), records);
        }
        return in -> skippers[in.readInt()].skip(in);
      case RECORD:
        return record(writer, records);
      default:
        throw new IllegalArgumentException("no Avro type " + writer.getType());
    }
  }

  private static AvroSkipper record(Schema writer, Map<Schema, AvroSkipper[]> records) {
    AvroSkipper[] skippers = records.get(writer);
    if (skippers == null) {
      List<Schema.Field> fields = writer.getFields();
      skippers = new AvroSkipper[fields.size()];
      records.put(writer, skippers);
      for (int i = 0; i < skippers.length; i++) {
        skippers[i] = of(fields.get(i).schema(), records);
      }
    }
    AvroSkipper[] fields = skippers;
    return in -> {
      for (AvroSkipper skipper : fields) {
        skipper.skip(in);
      }
    };
  }

  /** An array's or map's blocks: a count (negative: its byte size follows), items, until 0. */
  private static AvroSkipper blocks(AvroSkipper item) {
    return in -> {
      for (long count = in.readLong(); count != 0; count = in.readLong()) {
        if (count < 0) {
          in.skip(in.readLong());
        } else {
          for (long i = 0; i < count; i++) {
            item.skip(in);
          }
        }
      }
    };
  }
}
