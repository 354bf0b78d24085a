package io.gregor.spark;

import io.gregor.spark.plan.SourceOptions;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read of topics, batch or streaming. The options are parsed here, when Spark asks for a
 * batch or a stream, because only then is it known which of the two rules apply (the
 * starting/ending defaults and what each may not say).
 */
final class GregorScan implements Scan {
  private final StructType readSchema;
  private final CaseInsensitiveStringMap options;

  GregorScan(StructType readSchema, CaseInsensitiveStringMap options) {
    this.readSchema = readSchema;
    this.options = options;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  /** Names the source in plans (EXPLAIN, the SQL tab), where Python scans say PythonScan. */
  @Override
  public String description() {
    return "GregorScan(" + String.join(", ", readSchema.fieldNames()) + ")";
  }

  /** Every task's reader builds column vectors: no row is ever made in the source. */
  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return ColumnarSupportMode.SUPPORTED;
  }

  @Override
  public Batch toBatch() {
    return new GregorBatch(SourceOptions.parse(options, false), readSchema);
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new GregorMicroBatchStream(SourceOptions.parse(options, true), readSchema);
  }
}
