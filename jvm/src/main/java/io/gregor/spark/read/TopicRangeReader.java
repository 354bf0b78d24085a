package io.gregor.spark.read;

import io.gregor.spark.wire.Bootstrap;
import io.gregor.spark.wire.ConnectionPool;
import io.gregor.spark.wire.ErrorCodes;
import io.gregor.spark.wire.Fetch;
import io.gregor.spark.wire.LeaderCache;
import io.gregor.spark.wire.LeaderUnavailable;
import io.gregor.spark.wire.ListOffsets;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Map;
import java.util.zip.CRC32C;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one TopicRange on an executor: Fetch from the partition's leader, record batches in,
 * column batches out (the fetch loop of partition_reader.py, which the Python source keeps).
 *
 * <p>Each answer's batch headers are walked first (CRC checked, control batches and aborted
 * transactions left out); the next Fetch goes out as soon as they say where the answer ends, so
 * the broker reads and sends while this task decodes. Nothing joins a group or commits: Spark's
 * checkpoint remembers what was read. Reading stops by offset, not by count, because compaction
 * and transaction markers leave gaps; gaps up to the high watermark (last stable offset at
 * read_committed) are skipped. A leader that moved or went away is found again through the
 * metadata after the retry backoff; offsets that are gone are data loss (failOnDataLoss); no
 * progress for kafkaConsumer.pollTimeoutMs fails the task.
 */
public final class TopicRangeReader implements PartitionReader<ColumnarBatch> {
  private static final Logger LOG = LoggerFactory.getLogger(TopicRangeReader.class);

  private final TopicRange range;
  private final ReadSettings settings;
  private final RecordBatchDecoder decoder;
  private final ColumnarBatch batch;
  private final int capacity;
  private final CRC32C crc = new CRC32C();
  private final long timeoutNanos;

  private Bootstrap.Leader leader;
  private boolean inFlight;
  /**
   * Why the next Fetch could not be sent, while the last answer's batches are still decoded from
   * the connection's buffer: the connection is dropped only once they are done.
   */
  private String lostLeader;
  /** The next offset still to read. */
  private long position;
  /** When waiting for the next offset turns into an error. */
  private long deadline;

  // The data batches of the last answer still to decode: where they start in its buffer.
  private byte[] answer;
  private int[] wanted = new int[64];
  private int wantedCount;
  private int nextWanted;
  /** The offset the last answer was fetched from: records below it are not the range's. */
  private long answerFrom;

  TopicRangeReader(TopicRange range, ColumnVector[] columns, RecordBatchDecoder decoder,
      int capacity) {
    this.range = range;
    this.settings = range.settings();
    this.decoder = decoder;
    this.capacity = capacity;
    this.batch = new ColumnarBatch(columns);
    this.position = range.start();
    this.timeoutNanos = settings.pollTimeoutMs() * 1_000_000L;
    this.deadline = System.nanoTime() + timeoutNanos;
  }

  @Override
  public boolean next() {
    decoder.resetColumns();
    int rows = 0;
    while (rows < capacity && !decoder.full()) {
      if (decoder.hasRecords()) {
        rows = decoder.decode(rows, capacity);
      } else if (nextWanted < wantedCount) {
        decoder.start(answer, wanted[nextWanted++], answerFrom, range.end());
      } else if (position < range.end()) {
        if (rows > 0 && decoder.holdsAnswer()) {
          break; // the next answer would be received into the buffer these rows point into
        }
        fetchOnce();
      } else {
        break;
      }
    }
    batch.setNumRows(rows);
    return rows > 0;
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  /**
   * Gives the connection back to the JVM's pool for the next task, unless a Fetch is still in
   * flight on it (a query that stopped early) or it failed; the column batch (whose slices point
   * into the connection's answer buffer) is Spark's no longer.
   */
  @Override
  public void close() {
    if (leader != null && !inFlight && lostLeader == null) {
      ConnectionPool.release(settings, leader.connection());
      leader = null;
    }
    drop();
    decoder.close();
    batch.close();
  }

  /**
   * One turn of the fetch loop: an answer taken, or an error dealt with. Whether the deadline has
   * passed is read before the answer, which may itself end the wait (a log that ends below the
   * range is data loss once the deadline has passed): read after it, the deadline could pass in
   * between and a log that ended would be taken for a slow broker.
   */
  private void fetchOnce() {
    long before = position;
    boolean late = System.nanoTime() - deadline > 0;
    Fetch.PartitionData data = fetch();
    if (data != null) {
      take(data, before);
    }
    if (position > before) {
      deadline = System.nanoTime() + timeoutNanos;
    } else if (late) {
      throw new IllegalStateException(range.topic() + "-" + range.partition()
          + ": no record at offset " + position + " within " + settings.pollTimeoutMs()
          + " ms (reading up to " + range.end() + "); raise kafkaConsumer.pollTimeoutMs if the"
          + " broker is just slow");
    }
  }

  /** This partition's part of the next Fetch answer; null after an error was dealt with. */
  private Fetch.PartitionData fetch() {
    if (lostLeader != null) {
      retryLater(lostLeader);
      lostLeader = null;
      return null;
    }
    Fetch.PartitionData data;
    try {
      if (!inFlight) {
        sendFetch();
      }
      inFlight = false;
      data = Fetch.receive(leader.connection(), range.topic(), range.partition());
    } catch (LeaderUnavailable e) {
      inFlight = false;
      retryLater(e.getMessage());
      return null;
    }
    short error = data.errorCode;
    if (error == ErrorCodes.OFFSET_OUT_OF_RANGE) {
      outOfRange();
      return null;
    }
    if (ErrorCodes.leaderMoved(error)) {
      retryLater(ErrorCodes.name(error));
      return null;
    }
    if (error != ErrorCodes.NONE) {
      throw new IllegalStateException(range.topic() + "-" + range.partition()
          + ": fetch at offset " + position + " answered " + ErrorCodes.name(error));
    }
    return data;
  }

  private void sendFetch() throws LeaderUnavailable {
    if (leader == null) {
      leader = Bootstrap.leader(settings, range.topic(), range.partition());
    }
    Fetch.send(leader.connection(), range.topic(), range.partition(), leader.epoch(), position,
        settings);
  }

  /**
   * Walks the answer's batches: those holding offsets from position on move position past them,
   * and the data batches among them that are kept are queued for decoding. Then, before anything
   * is decompressed, the next Fetch goes out from the new position.
   */
  private void take(Fetch.PartitionData data, long before) {
    boolean readCommitted = settings.isolationLevel() == ReadSettings.READ_COMMITTED;
    // Only a read_committed answer's list is the reader's to apply.
    AbortedTransactions committed = readCommitted && data.abortedProducerIds.length > 0
        ? new AbortedTransactions(data.abortedProducerIds, data.abortedFirstOffsets)
        : null;
    ByteBuffer records = data.records;
    byte[] b = records.array();
    int at = records.arrayOffset() + records.position();
    int stop = at + records.remaining();
    wantedCount = 0;
    nextWanted = 0;
    while (stop - at >= RecordBatchDecoder.LOG_OVERHEAD) {
      int size = RecordBatchDecoder.size(b, at);
      if (size < RecordBatchDecoder.HEADER_SIZE) {
        throw new IllegalStateException("record batch at byte " + (at - records.arrayOffset()
            - records.position()) + " claims size " + size);
      }
      if (size > stop - at) {
        break; // the answer's byte limit fell inside this batch: fetched again next time
      }
      RecordBatchDecoder.validate(b, at, crc);
      long next = RecordBatchDecoder.nextOffset(b, at);
      if (next > position) {
        position = next;
        if (keeps(committed, b, at) && RecordBatchDecoder.recordsCount(b, at) > 0) {
          if (wantedCount == wanted.length) {
            wanted = Arrays.copyOf(wanted, wantedCount * 2);
          }
          wanted[wantedCount++] = at;
        }
      }
      at += size;
    }
    answer = b;
    answerFrom = before;
    if (position == before) {
      noBatch(readCommitted ? data.lastStableOffset : data.highWatermark);
    } else if (position < range.end()) {
      try {
        sendFetch();
        inFlight = true;
      } catch (LeaderUnavailable e) {
        lostLeader = e.getMessage();
      }
    }
  }

  private boolean keeps(AbortedTransactions committed, byte[] b, int at) {
    int attributes = RecordBatchDecoder.attributes(b, at);
    boolean control = RecordBatchDecoder.isControl(attributes);
    if (committed == null) {
      return !control;
    }
    return committed.keeps(RecordBatchDecoder.nextOffset(b, at) - 1, control,
        RecordBatchDecoder.isTransactional(attributes), RecordBatchDecoder.producerId(b, at),
        () -> decoder.isCommitMarker(b, at));
  }

  /**
   * The broker has no batch from position on below its high watermark: the offsets up to it are
   * gaps (compaction, or records of aborted transactions that were cleaned). A high watermark at
   * or below position is waited out until the deadline, as Spark's Kafka source waits out its
   * poll timeout: a newly elected leader's high watermark can trail the old one's for a moment.
   * After that, the log was cut below the range's end.
   */
  private void noBatch(long highWatermark) {
    if (highWatermark > position) {
      position = Math.min(highWatermark, range.end());
    } else if (System.nanoTime() - deadline > 0) {
      DataLoss.report(range.topic() + "-" + range.partition() + ": expected records up to offset "
          + range.end() + ", but the log now ends at offset " + highWatermark,
          settings.failOnDataLoss());
      position = range.end();
    }
  }

  /** The broker no longer has position: deleted below, or truncated above. */
  private void outOfRange() {
    long low;
    long high;
    try {
      low = listOffset(ListOffsets.EARLIEST);
      high = listOffset(ListOffsets.LATEST);
    } catch (LeaderUnavailable e) {
      retryLater(e.getMessage());
      return;
    }
    DataLoss.report(range.topic() + "-" + range.partition() + ": expected to read from offset "
        + position + ", but the available offsets are " + low + " to " + high,
        settings.failOnDataLoss());
    position = position < low && low < range.end() ? low : range.end();
  }

  private long listOffset(long timestamp) throws LeaderUnavailable {
    TopicPartition tp = new TopicPartition(range.topic(), range.partition());
    return ListOffsets.query(leader.connection(), Map.of(tp, timestamp),
        settings.isolationLevel()).get(tp)[0];
  }

  /**
   * The leader is gone or moved: find it again, through a new Metadata request, after the
   * client's retry backoff.
   */
  private void retryLater(String reason) {
    LOG.info("{}-{}: {}; looking for the leader again", range.topic(), range.partition(), reason);
    drop();
    LeaderCache.invalidate(settings, range.topic());
    try {
      Thread.sleep(settings.retryBackoffMs());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting to retry", e);
    }
  }

  /** Closes the connection to the leader, if any (one that failed, or that is still busy). */
  private void drop() {
    if (leader != null) {
      leader.connection().close();
      leader = null;
    }
    inFlight = false;
  }
}
