package io.gregor.spark.wire;

import io.gregor.spark.read.ReadSettings;
import java.nio.ByteBuffer;

/**
 * Fetch v11 (the last non-flexible version) for one partition, as a consumer (replica id -1,
 * no fetch session). The answer's records stay a slice of the connection's answer buffer: they
 * are decoded straight from there.
 */
public final class Fetch {
  static final short API_KEY = 1;
  static final short VERSION = 11;

  private Fetch() {}

  /** This partition's part of one Fetch answer. */
  public static final class PartitionData {
    public final short errorCode;
    public final long highWatermark;
    public final long lastStableOffset;
    public final long logStartOffset;
    /** Aborted transactions (read_committed only): producer ids and their first offsets. */
    public final long[] abortedProducerIds;
    public final long[] abortedFirstOffsets;
    /** The record batches as the broker stores them; the last one may be cut short. */
    public final ByteBuffer records;

    PartitionData(short errorCode, long highWatermark, long lastStableOffset,
        long logStartOffset, long[] abortedProducerIds, long[] abortedFirstOffsets,
        ByteBuffer records) {
      this.errorCode = errorCode;
      this.highWatermark = highWatermark;
      this.lastStableOffset = lastStableOffset;
      this.logStartOffset = logStartOffset;
      this.abortedProducerIds = abortedProducerIds;
      this.abortedFirstOffsets = abortedFirstOffsets;
      this.records = records;
    }
  }

  /** Sends a Fetch of {@code partition} from {@code offset}; the answer is read by receive. */
  public static void send(KafkaConnection c, String topic, int partition, int leaderEpoch,
      long offset, ReadSettings s) throws LeaderUnavailable {
    RequestBuffer body = new RequestBuffer()
        .int32(-1) // replica id: a consumer
        .int32(s.maxWaitMs())
        .int32(s.minBytes())
        .int32(s.maxBytes())
        .int8(s.isolationLevel())
        .int32(0) // no fetch session
        .int32(-1)
        .int32(1)
        .string(topic)
        .int32(1)
        .int32(partition)
        .int32(leaderEpoch)
        .int64(offset)
        .int64(-1) // log start offset: only followers send one
        .int32(s.partitionMaxBytes())
        .int32(0) // forgotten topics
        .string(""); // rack id
    c.send(API_KEY, VERSION, body.toByteBuffer());
  }

  /**
   * This partition's data in the answer to the oldest request sent on {@code c}; a request-level
   * error is reported as the partition's. Valid until the next receive on {@code c}.
   */
  public static PartitionData receive(KafkaConnection c, String topic, int partition)
      throws LeaderUnavailable {
    ByteBuffer b = c.receive();
    b.getInt(); // throttle time
    short requestError = b.getShort();
    b.getInt(); // session id
    for (int t = b.getInt(); t > 0; t--) {
      String name = Answers.string(b);
      for (int p = b.getInt(); p > 0; p--) {
        int index = b.getInt();
        short error = b.getShort();
        long highWatermark = b.getLong();
        long lastStable = b.getLong();
        long logStart = b.getLong();
        int aborted = b.getInt();
        long[] producers = new long[Math.max(aborted, 0)];
        long[] firsts = new long[producers.length];
        for (int i = 0; i < producers.length; i++) {
          producers[i] = b.getLong();
          firsts[i] = b.getLong();
        }
        b.getInt(); // preferred read replica
        int size = b.getInt();
        ByteBuffer records = b.slice(b.position(), Math.max(size, 0));
        b.position(b.position() + Math.max(size, 0));
        if (index == partition && name.equals(topic)) {
          return new PartitionData(requestError != ErrorCodes.NONE ? requestError : error,
              highWatermark, lastStable, logStart, producers, firsts, records);
        }
      }
    }
    throw new LeaderUnavailable("the fetch answer has no " + topic + "-" + partition + " ("
        + ErrorCodes.name(requestError) + ")");
  }
}
