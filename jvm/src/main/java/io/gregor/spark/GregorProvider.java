package io.gregor.spark;

import io.gregor.spark.plan.SourceOptions;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.jdk.javaapi.CollectionConverters;

/**
 * format("gregor") on the JVM: reads fetch record batches from partition leaders and decode them
 * into column vectors; writes go to the Python sink (see GregorTable).
 *
 * <p>Batch writes come here as to a V1 source (createRelation), as they do to Spark's Kafka
 * source: that is the only way Spark lets a source take its default save mode, ErrorIfExists, so
 * that df.write.format("gregor").option(...).save() works without mode("append"), as the Kafka
 * integration guide writes it. A V2 table that can batch-write is refused every mode but Append
 * and Overwrite.
 */
public final class GregorProvider
    implements TableProvider, DataSourceRegister, CreatableRelationProvider {
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

  /**
   * Append (and ErrorIfExists, Spark's default, which means the same for a topic) through the
   * Python sink, with the writer's options; Overwrite and Ignore are refused, as Spark's Kafka
   * sink refuses them.
   */
  @Override
  public BaseRelation createRelation(
      SQLContext sqlContext,
      SaveMode mode,
      scala.collection.immutable.Map<String, String> parameters,
      Dataset<Row> data) {
    if (mode != SaveMode.Append && mode != SaveMode.ErrorIfExists) {
      throw new IllegalArgumentException(
          "save mode "
              + mode.name().toLowerCase(Locale.ROOT)
              + " is not allowed for gregor: a topic is append-only; the allowed save modes are"
              + " append and errorifexists (the default)");
    }
    data.write()
        .format(GregorTable.PYTHON_SOURCE)
        .mode(SaveMode.Append)
        .options(CollectionConverters.asJava(parameters))
        .save();
    return new WrittenRelation(sqlContext);
  }

  /**
   * What createRelation must return, though nothing can be read through it (Spark's Kafka
   * sink returns the same kind): Spark only tries to refresh caches with it, and gives up.
   */
  private static final class WrittenRelation extends BaseRelation {
    private final SQLContext sqlContext;

    WrittenRelation(SQLContext sqlContext) {
      this.sqlContext = sqlContext;
    }

    @Override
    public SQLContext sqlContext() {
      return sqlContext;
    }

    @Override
    public StructType schema() {
      throw new UnsupportedOperationException("a write to gregor cannot be read back as a relation");
    }
  }
}
