package io.gregor.spark.read;

import java.util.Arrays;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary column (key or value) whose rows are slices of the buffers the records were decoded
 * from: the fetch answer, or a batch's decompressed records. Spark copies every value out with
 * getBinary anyway; an OnHeapColumnVector had it copied in first, so each byte was copied twice.
 * The buffers must stay unchanged while the column batch is Spark's, until the next
 * {@code next()}: the reader ends a column batch before the next fetch answer is received, and
 * the decoder decompresses each record batch of a column batch into a buffer of its own.
 */
final class BinarySlices extends ColumnVector {
  private final byte[][] buffers;
  private final int[] offsets;
  /** -1 for null. */
  private final int[] lengths;
  private int nulls;

  BinarySlices(int capacity) {
    super(DataTypes.BinaryType);
    buffers = new byte[capacity][];
    offsets = new int[capacity];
    lengths = new int[capacity];
  }

  void put(int row, byte[] buffer, int offset, int length) {
    buffers[row] = buffer;
    offsets[row] = offset;
    lengths[row] = length;
  }

  void putNull(int row) {
    buffers[row] = null;
    lengths[row] = -1;
    nulls++;
  }

  /** Before the rows of the next column batch are put. */
  void reset() {
    nulls = 0;
  }

  /** Drops the references to the buffers, so that a finished task does not hold them. */
  @Override
  public void close() {
    Arrays.fill(buffers, null);
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public boolean isNullAt(int row) {
    return lengths[row] < 0;
  }

  @Override
  public byte[] getBinary(int row) {
    int length = lengths[row];
    if (length < 0) {
      return null;
    }
    int offset = offsets[row];
    return Arrays.copyOfRange(buffers[row], offset, offset + length);
  }

  @Override
  public boolean getBoolean(int row) {
    throw unsupported();
  }

  @Override
  public byte getByte(int row) {
    throw unsupported();
  }

  @Override
  public short getShort(int row) {
    throw unsupported();
  }

  @Override
  public int getInt(int row) {
    throw unsupported();
  }

  @Override
  public long getLong(int row) {
    throw unsupported();
  }

  @Override
  public float getFloat(int row) {
    throw unsupported();
  }

  @Override
  public double getDouble(int row) {
    throw unsupported();
  }

  @Override
  public ColumnarArray getArray(int row) {
    throw unsupported();
  }

  @Override
  public ColumnarMap getMap(int row) {
    throw unsupported();
  }

  @Override
  public Decimal getDecimal(int row, int precision, int scale) {
    throw unsupported();
  }

  @Override
  public UTF8String getUTF8String(int row) {
    throw unsupported();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw unsupported();
  }

  private static UnsupportedOperationException unsupported() {
    return new UnsupportedOperationException("a binary column has only getBinary");
  }
}
