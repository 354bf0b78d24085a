package io.gregor.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** A topic (or topics) as a table: read by this package, written by the Python sink. */
public final class GregorTable implements org.apache.spark.sql.connector.catalog.Table {
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

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.noneOf(TableCapability.class);
  }
}
