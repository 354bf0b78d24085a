package io.gregor.spark;

import io.gregor.spark.plan.SourceOptions;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * format("gregor") on the JVM: reads fetch record batches from partition leaders and decode them
 * into column vectors; writes go to the Python sink (see GregorTable).
 */
public final class GregorProvider implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "gregor";
  }

  /**
   * Called when a read's DataFrame is made (load()), which is where Spark's Kafka source
   * refuses bad options; Spark also calls it for a streaming write, whose options it leaves be.
   */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    SourceOptions.validateOnLoad(options);
    return SourceSchema.of(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new GregorTable(schema, properties);
  }

  /**
   * Spark hands a write's own schema to getTable (the sink takes any columns it knows); a read
   * may name its schema, as with the Python source.
   */
  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }
}
