package io.gregor.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Topics as a table. Reads are this package's; writes, batch and streaming, are the Python
 * sink's (its at-least-once and exactly-once modes, transactions included), reached through
 * Spark's own wrapper of Python data sources under the name gregor.spark.register() gives it.
 */
final class GregorTable implements SupportsRead, SupportsWrite {
  /** The Python data source's name when this provider owns "gregor" (gregor/spark/__init__.py). */
  static final String PYTHON_SOURCE = "gregor_python";

  private final StructType schema;
  private final Map<String, String> properties;

  GregorTable(StructType schema, Map<String, String> properties) {
    this.schema = schema;
    this.properties = properties;
  }

  @Override
  public String name() {
    return "gregor";
  }

  @Override
  public Column[] columns() {
    StructField[] fields = schema.fields();
    Column[] columns = new Column[fields.length];
    for (int i = 0; i < fields.length; i++) {
      columns[i] = Column.create(fields[i].name(), fields[i].dataType(), fields[i].nullable());
    }
    return columns;
  }

  @Override
  public Map<String, String> properties() {
    return properties;
  }

  /**
   * No BATCH_WRITE: batch writes go to GregorProvider.createRelation, where Spark's default save
   * mode is allowed. TRUNCATE for Complete mode, as the Python sink's.
   */
  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(
        TableCapability.BATCH_READ,
        TableCapability.MICRO_BATCH_READ,
        TableCapability.STREAMING_WRITE,
        TableCapability.TRUNCATE);
  }

  /**
   * A read has the source's schema: a schema given to the reader (DataFrameReader.schema)
   * that differs would have tasks decode records into columns of other types.
   */
  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    StructType fixed = SourceSchema.of(options);
    if (!schema.equals(fixed)) {
      throw new IllegalArgumentException(
          "the gregor source has a fixed schema and cannot be read with a custom one: "
              + schema.simpleString()
              + " is not "
              + fixed.simpleString());
    }
    return new GregorScanBuilder(schema, options);
  }

  /** A stream's writes: the Python sink's, in Update mode too (see SinkWriteBuilder). */
  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    PythonDataSourceV2 python = new PythonDataSourceV2();
    python.setShortName(PYTHON_SOURCE);
    SupportsWrite sink = (SupportsWrite) python.getTable(info.schema(), new Transform[0], properties);
    return new SinkWriteBuilder((SupportsTruncate) sink.newWriteBuilder(info));
  }

  /**
   * The Python sink's write builder, also taking Update mode, which Spark allows only a builder
   * marked SupportsStreamingUpdateAsAppend (PySpark's is not): a topic takes each micro-batch's
   * updated rows appended, as Spark's Kafka sink, which is so marked, writes them.
   */
  private static final class SinkWriteBuilder
      implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
    private final SupportsTruncate python;

    SinkWriteBuilder(SupportsTruncate python) {
      this.python = python;
    }

    @Override
    public Write build() {
      return python.build();
    }

    @Override
    public WriteBuilder truncate() {
      return python.truncate();
    }
  }
}
