package io.gregor.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Takes the columns a query needs, so that tasks decode only those: a count or a query of
 * offsets never copies a key or a value.
 */
final class GregorScanBuilder implements SupportsPushDownRequiredColumns {
  private final CaseInsensitiveStringMap options;
  private StructType readSchema;

  GregorScanBuilder(StructType schema, CaseInsensitiveStringMap options) {
    this.readSchema = schema;
    this.options = options;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    readSchema = requiredSchema;
  }

  @Override
  public Scan build() {
    return new GregorScan(readSchema, options);
  }
}
