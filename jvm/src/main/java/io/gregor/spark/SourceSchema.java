package io.gregor.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The schema of records read from a topic: Spark's Kafka source schema, so that queries written
 * for format("kafka") run unchanged (the same as gregor/spark/schema.py).
 */
public final class SourceSchema {
  private SourceSchema() {}

  /** One record header, as Spark's Kafka source and sink represent it. */
  public static final StructType HEADER =
      new StructType(
          new StructField[] {
            DataTypes.createStructField("key", DataTypes.StringType, true),
            DataTypes.createStructField("value", DataTypes.BinaryType, true)
          });

  /** The schema of a read with these options. */
  public static StructType of(CaseInsensitiveStringMap options) {
    return of("true".equalsIgnoreCase(options.getOrDefault("includeHeaders", "false").strip()));
  }

  /** The source schema; "headers" only with includeHeaders=true, as Spark's. */
  public static StructType of(boolean includeHeaders) {
    StructType schema =
        new StructType()
            .add("key", DataTypes.BinaryType)
            .add("value", DataTypes.BinaryType)
            .add("topic", DataTypes.StringType)
            .add("partition", DataTypes.IntegerType)
            .add("offset", DataTypes.LongType)
            .add("timestamp", DataTypes.TimestampType)
            .add("timestampType", DataTypes.IntegerType);
    if (includeHeaders) {
      schema = schema.add("headers", new ArrayType(HEADER, true));
    }
    return schema;
  }
}
