package io.gregor.spark.read;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Objects;
import java.util.stream.Stream;
import java.util.zip.CRC32C;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;

/**
 * Record batches (v2, as the broker stores them) decoded straight into Spark's column vectors:
 * no object per record. The batch-level checks (framing, magic, CRC32C) are static, for the
 * reader's walk over a fetch answer; an instance decodes the records of one batch at a time,
 * possibly over several column batches, resuming where the last call stopped.
 *
 * <p>Only the required columns are written; a record's key, value and headers are skipped by
 * their lengths when they are not. When no per-record column is required (a count, say), a batch
 * wholly inside the range is counted from its header without being decompressed. Timestamps are
 * Spark's microseconds; a LogAppendTime batch gives every record the batch's max timestamp, as
 * Kafka's clients report it (record_scan.py does the same for the Python reader).
 */
final class RecordBatchDecoder {
  // The v2 batch header (gregor/protocol/record_batch.py has the layout).
  static final int LOG_OVERHEAD = 12;
  static final int HEADER_SIZE = 61;
  private static final int LENGTH = 8;
  private static final int MAGIC = 16;
  private static final int CRC = 17;
  private static final int ATTRIBUTES = 21;
  private static final int LAST_OFFSET_DELTA = 23;
  private static final int BASE_TIMESTAMP = 27;
  private static final int MAX_TIMESTAMP = 35;
  private static final int PRODUCER_ID = 43;
  private static final int RECORDS_COUNT = 57;
  private static final int COMPRESSION_MASK = 0x07;
  private static final int LOG_APPEND_TIME = 0x08;
  private static final int TRANSACTIONAL = 0x10;
  private static final int CONTROL = 0x20;

  private static final VarHandle INT =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
  private static final VarHandle LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);

  private final BinarySlices keys;
  private final BinarySlices values;
  private final WritableColumnVector offsets;
  private final WritableColumnVector timestamps;
  private final WritableColumnVector timestampTypes;
  private final WritableColumnVector headers;
  private final WritableColumnVector headerEntries;
  private final WritableColumnVector headerKeys;
  private final WritableColumnVector headerValues;
  /** The required ones among the vectors above, reset for every column batch. */
  private final WritableColumnVector[] required;
  /** No per-record column is required: only how many records there are matters. */
  private final boolean countOnly;
  /** Key or value is required: its rows point into the buffers records are decoded from. */
  private final boolean slices;
  /** Key, value or headers are required, so a record must be read past its offset. */
  private final boolean readsPayload;
  private final Decompression decompression = new Decompression();

  // The batch being decoded.
  private byte[] data;
  /** Whether data is the decompression's output, rather than the fetch answer. */
  private boolean decompressed;
  private int pos;
  private int end;
  private int recordsLeft;
  private int uncountedRecords;
  private long baseOffset;
  private long baseTimestamp;
  private long maxTimestamp;
  private boolean logAppendTime;
  private long first;
  private long last;
  /** Header entries written into the current column batch. */
  private int headerRow;
  /** Key, value and header bytes written into the current column batch. */
  private long payloadBytes;
  /**
   * Bytes after which a column batch takes no more records (the Python reader's CHUNK_BYTES):
   * rows alone would let large records pile up, 4096 of 1 MiB each being 4 GiB of vectors.
   */
  static final int BATCH_BYTES = 4 << 20;

  /** Vectors are null for columns that are not required; headers is array of struct. */
  RecordBatchDecoder(BinarySlices keys, BinarySlices values,
      WritableColumnVector offsets, WritableColumnVector timestamps,
      WritableColumnVector timestampTypes, WritableColumnVector headers) {
    this.keys = keys;
    this.values = values;
    this.offsets = offsets;
    this.timestamps = timestamps;
    this.timestampTypes = timestampTypes;
    this.headers = headers;
    this.headerEntries = headers == null ? null : headers.arrayData();
    this.headerKeys = headers == null ? null : headerEntries.getChild(0);
    this.headerValues = headers == null ? null : headerEntries.getChild(1);
    this.required = Stream.of(offsets, timestamps, timestampTypes, headers)
        .filter(Objects::nonNull).toArray(WritableColumnVector[]::new);
    this.slices = keys != null || values != null;
    this.readsPayload = keys != null || values != null || headers != null;
    this.countOnly = !readsPayload && offsets == null && timestamps == null
        && timestampTypes == null;
  }

  boolean countOnly() {
    return countOnly;
  }

  /**
   * Whether the column batch being filled points into the fetch answer, so that no other answer
   * may be received into its buffer before the column batch is done with.
   */
  boolean holdsAnswer() {
    return slices;
  }

  // ---- the batch header, read where the batch starts in a fetch answer ----

  static long baseOffset(byte[] b, int at) {
    return (long) LONG.get(b, at);
  }

  /** The whole batch's size in bytes, from its length field. */
  static int size(byte[] b, int at) {
    return (int) INT.get(b, at + LENGTH) + LOG_OVERHEAD;
  }

  static long nextOffset(byte[] b, int at) {
    return baseOffset(b, at) + (int) INT.get(b, at + LAST_OFFSET_DELTA) + 1;
  }

  static int attributes(byte[] b, int at) {
    return ((b[at + ATTRIBUTES] & 0xff) << 8) | (b[at + ATTRIBUTES + 1] & 0xff);
  }

  static boolean isControl(int attributes) {
    return (attributes & CONTROL) != 0;
  }

  static boolean isTransactional(int attributes) {
    return (attributes & TRANSACTIONAL) != 0;
  }

  static long producerId(byte[] b, int at) {
    return (long) LONG.get(b, at + PRODUCER_ID);
  }

  static int recordsCount(byte[] b, int at) {
    return (int) INT.get(b, at + RECORDS_COUNT);
  }

  /**
   * Checks framing, magic and CRC32C of the whole batch at {@code at} (which the caller made sure
   * is in the buffer), with validate_batch's messages.
   */
  static void validate(byte[] b, int at, CRC32C crc) {
    if (b[at + MAGIC] != 2) {
      throw new IllegalStateException("unsupported record batch magic " + b[at + MAGIC]);
    }
    int length = (int) INT.get(b, at + LENGTH);
    if (length < HEADER_SIZE - LOG_OVERHEAD) {
      throw new IllegalStateException("record batch length " + length + " is too small");
    }
    if ((int) INT.get(b, at + LAST_OFFSET_DELTA) < 0 || recordsCount(b, at) < 0) {
      throw new IllegalStateException("negative record count or offset delta");
    }
    crc.reset();
    crc.update(b, at + ATTRIBUTES, length + LOG_OVERHEAD - ATTRIBUTES);
    if ((int) crc.getValue() != (int) INT.get(b, at + CRC)) {
      throw new IllegalStateException("record batch CRC32C mismatch");
    }
  }

  /** Whether a control batch is a commit marker (else an abort marker): its record's key. */
  boolean isCommitMarker(byte[] b, int at) {
    recordsOf(b, at);
    if (recordsLeft == 0) {
      throw new IllegalStateException("control batch without a control record key");
    }
    varint(); // record length
    pos++; // attributes
    varlong(); // timestamp delta
    varint(); // offset delta
    int keyLength = varint();
    recordsLeft = 0;
    if (keyLength < 4 || keyLength > end - pos) {
      throw new IllegalStateException("control record key too short");
    }
    int type = ((data[pos + 2] & 0xff) << 8) | (data[pos + 3] & 0xff);
    if (type > 1) {
      throw new IllegalStateException("unknown control record type " + type);
    }
    return type == 1;
  }

  // ---- records ----

  /** Done with decoding: the decompression buffer goes to the thread's next task. */
  void close() {
    data = null;
    decompression.close();
  }

  /** Resets the vectors for the next column batch. */
  void resetColumns() {
    for (WritableColumnVector v : required) {
      v.reset();
    }
    if (keys != null) {
      keys.reset();
    }
    if (values != null) {
      values.reset();
    }
    decompression.newColumnBatch(decompressed && recordsLeft > 0);
    headerRow = 0;
    payloadBytes = 0;
  }

  /**
   * Starts on the data batch at {@code at}: its records in [first, last) are the ones decoded.
   * Decompresses it unless only a count is needed and the batch lies wholly in the range.
   */
  void start(byte[] b, int at, long first, long last) {
    this.first = first;
    this.last = last;
    long base = baseOffset(b, at);
    if (countOnly && base >= first && nextOffset(b, at) <= last) {
      uncountedRecords = recordsCount(b, at);
      recordsLeft = 0;
      return;
    }
    recordsOf(b, at);
  }

  /** Whether the current column batch holds BATCH_BYTES of payload: it takes no more rows. */
  boolean full() {
    return payloadBytes >= BATCH_BYTES;
  }

  boolean hasRecords() {
    return recordsLeft > 0 || uncountedRecords > 0;
  }

  private void recordsOf(byte[] b, int at) {
    int attributes = attributes(b, at);
    baseOffset = baseOffset(b, at);
    baseTimestamp = (long) LONG.get(b, at + BASE_TIMESTAMP);
    maxTimestamp = (long) LONG.get(b, at + MAX_TIMESTAMP);
    logAppendTime = (attributes & LOG_APPEND_TIME) != 0;
    recordsLeft = recordsCount(b, at);
    uncountedRecords = 0;
    int codec = attributes & COMPRESSION_MASK;
    int recordsAt = at + HEADER_SIZE;
    int recordsEnd = at + size(b, at);
    decompressed = codec != Decompression.NONE;
    if (!decompressed) {
      data = b;
      pos = recordsAt;
      end = recordsEnd;
    } else {
      if (!slices) {
        decompression.newColumnBatch(false); // nothing points into the last output
      }
      decompression.decompress(codec, b, recordsAt, recordsEnd - recordsAt);
      data = decompression.output();
      pos = decompression.start();
      end = pos + decompression.length();
    }
  }

  /**
   * Decodes records into rows {@code row} on, up to {@code capacity}; returns the next free row.
   * Records below the range are skipped; the first one at or past its end ends the batch.
   */
  int decode(int row, int capacity) {
    if (uncountedRecords > 0) {
      int taken = Math.min(uncountedRecords, capacity - row);
      uncountedRecords -= taken;
      return row + taken;
    }
    try {
      while (recordsLeft > 0 && row < capacity && payloadBytes < BATCH_BYTES) {
        recordsLeft--;
        if (pos >= end) {
          throw new IllegalStateException("record data ends inside a record");
        }
        int length = varint();
        int recordEnd = pos + length;
        if (length < 0 || recordEnd > end) {
          throw new IllegalStateException("record data ends inside a record");
        }
        pos++; // attributes: unused in v2
        long timestampDelta = varlong();
        long offset = baseOffset + varint();
        if (offset >= last) {
          recordsLeft = 0;
          break;
        }
        if (offset < first) {
          pos = recordEnd;
          continue;
        }
        if (offsets != null) {
          offsets.putLong(row, offset);
        }
        if (timestamps != null) {
          long ms = logAppendTime ? maxTimestamp : baseTimestamp + timestampDelta;
          timestamps.putLong(row, ms * 1000);
        }
        if (timestampTypes != null) {
          timestampTypes.putInt(row, logAppendTime ? 1 : 0);
        }
        if (readsPayload) {
          int before = pos;
          payload(row, recordEnd);
          payloadBytes += pos - before; // lengths and header counts too: a bound, not a sum
        }
        pos = recordEnd;
        row++;
      }
    } catch (ArrayIndexOutOfBoundsException e) {
      throw new IllegalStateException("record data ends inside a record", e);
    }
    return row;
  }

  /** Key, value and headers of the record at pos, which ends at recordEnd. */
  private void payload(int row, int recordEnd) {
    int keyLength = varint();
    if (keyLength >= 0) {
      check(keyLength, recordEnd);
      if (keys != null) {
        keys.put(row, data, pos, keyLength);
      }
      pos += keyLength;
    } else if (keys != null) {
      keys.putNull(row);
    }
    if (values == null && headers == null) {
      return;
    }
    int valueLength = varint();
    if (valueLength >= 0) {
      check(valueLength, recordEnd);
      if (values != null) {
        values.put(row, data, pos, valueLength);
      }
      pos += valueLength;
    } else if (values != null) {
      values.putNull(row);
    }
    if (headers == null) {
      return;
    }
    int count = varint();
    if (count < 0 || count > recordEnd - pos) {
      throw new IllegalStateException("record data ends inside a record");
    }
    if (count == 0) {
      headers.putNull(row);
      return;
    }
    int firstEntry = headerRow;
    int needed = headerRow + count;
    headerEntries.reserve(needed);
    headerKeys.reserve(needed);
    headerValues.reserve(needed);
    for (int i = 0; i < count; i++) {
      int hkLength = varint();
      if (hkLength < 0) {
        throw new IllegalStateException("record header without a key");
      }
      check(hkLength, recordEnd);
      headerKeys.putByteArray(headerRow, data, pos, hkLength);
      pos += hkLength;
      int hvLength = varint();
      if (hvLength >= 0) {
        check(hvLength, recordEnd);
        headerValues.putByteArray(headerRow, data, pos, hvLength);
        pos += hvLength;
      } else {
        headerValues.putNull(headerRow);
      }
      headerRow++;
    }
    headers.putArray(row, firstEntry, count);
  }

  private void check(int length, int recordEnd) {
    if (length > recordEnd - pos) {
      throw new IllegalStateException("record data ends inside a record");
    }
  }

  /** A zigzag varint (Kafka's record fields), at pos. */
  private int varint() {
    byte[] d = data;
    int b = d[pos++];
    if (b >= 0) {
      return (b >>> 1) ^ -(b & 1);
    }
    int raw = b & 0x7f;
    for (int shift = 7; shift < 35; shift += 7) {
      b = d[pos++];
      raw |= (b & 0x7f) << shift;
      if (b >= 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new IllegalStateException("varint longer than 5 bytes");
  }

  /** A zigzag varlong, at pos. */
  private long varlong() {
    byte[] d = data;
    long b = d[pos++];
    if (b >= 0) {
      return (b >>> 1) ^ -(b & 1);
    }
    long raw = b & 0x7f;
    for (int shift = 7; shift < 70; shift += 7) {
      b = d[pos++];
      raw |= (b & 0x7f) << shift;
      if (b >= 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new IllegalStateException("varlong longer than 10 bytes");
  }
}
