package io.gregor.spark.read;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Creates the columnar readers of a scan, for the columns the query requires (in the required
 * schema's order): the source schema's per-record columns are vectors the decoder fills and
 * reuses from batch to batch; topic and partition are constants of the task.
 */
public final class TopicRangeReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  /** Rows per column batch: Spark's own default for vectorized reads. */
  static final int BATCH_ROWS = 4096;
  /**
   * Rows per batch when no per-record column is required (a count): there are no vectors to
   * fill, so bigger batches only save calls.
   */
  static final int COUNT_ROWS = 1 << 20;

  private final StructType requiredSchema;

  public TopicRangeReaderFactory(StructType requiredSchema) {
    this.requiredSchema = requiredSchema;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("the gregor source reads column batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    TopicRange range = (TopicRange) partition;
    StructField[] fields = requiredSchema.fields();
    ColumnVector[] columns = new ColumnVector[fields.length];
    WritableColumnVector[] byRole = new WritableColumnVector[6];
    BinarySlices[] slices = new BinarySlices[2];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      switch (name) {
        case "topic": {
          ConstantColumnVector topic = new ConstantColumnVector(BATCH_ROWS, fields[i].dataType());
          topic.setUtf8String(UTF8String.fromString(range.topic()));
          columns[i] = topic;
          break;
        }
        case "partition": {
          ConstantColumnVector number = new ConstantColumnVector(BATCH_ROWS, fields[i].dataType());
          number.setInt(range.partition());
          columns[i] = number;
          break;
        }
        case "key":
        case "value": {
          BinarySlices vector = new BinarySlices(BATCH_ROWS);
          slices[role(name)] = vector;
          columns[i] = vector;
          break;
        }
        default: {
          int role = role(name);
          OnHeapColumnVector vector = new OnHeapColumnVector(BATCH_ROWS, fields[i].dataType());
          byRole[role] = vector;
          columns[i] = vector;
        }
      }
    }
    RecordBatchDecoder decoder =
        new RecordBatchDecoder(slices[0], slices[1], byRole[2], byRole[3], byRole[4], byRole[5]);
    return new TopicRangeReader(range, columns, decoder,
        decoder.countOnly() ? COUNT_ROWS : BATCH_ROWS);
  }

  private static int role(String column) {
    switch (column) {
      case "key":
        return 0;
      case "value":
        return 1;
      case "offset":
        return 2;
      case "timestamp":
        return 3;
      case "timestampType":
        return 4;
      case "headers":
        return 5;
      default:
        throw new IllegalArgumentException("the gregor source has no column " + column);
    }
  }
}
