package io.gregor.spark.read;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.Snappy;

/**
 * The codecs of record batch v2, in the framings Kafka's clients interoperate on (see
 * gregor/protocol/compression.py): gzip; snappy raw (librdkafka) or in xerial's stream framing
 * (the Java client); the LZ4 frame format; zstd frames, whose content size may be missing.
 *
 * <p>The record batches decompressed for one column batch go one after the other into one
 * buffer (an arena), since the column batch's key and value slices point into them until Spark
 * is done with it. A new column batch writes from the arena's start again, in the other of two
 * arenas when the record batch it goes on with (begun in the last column batch) is in this one.
 */
final class Decompression {
  static final int NONE = 0;
  static final int GZIP = 1;
  static final int SNAPPY = 2;
  static final int LZ4 = 3;
  static final int ZSTD = 4;
  private static final String[] NAMES = {"NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"};
  // xerial's SnappyOutputStream header: magic, then two version ints that some writers store
  // little-endian, so only the magic identifies the framing.
  private static final byte[] XERIAL_MAGIC = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
  private static final int XERIAL_HEADER = 16;

  /** A task's output buffer left to the next task of its executor thread (see close). */
  private static final ThreadLocal<byte[][]> SPARE = new ThreadLocal<>();

  private final byte[][] arenas;
  /** The arena written to, and the one the last output went into. */
  private int current;
  private int lastArena;
  private byte[] out;
  /** Where the next output starts in out. */
  private int fill;
  private int start;
  private int length;

  Decompression() {
    byte[][] spare = SPARE.get();
    SPARE.remove();
    arenas = spare != null ? spare : new byte[][] {new byte[1 << 16], new byte[1 << 16]};
    out = arenas[0];
  }

  /**
   * Leaves the buffer to the thread's next task: grown to a batch's records (up to megabytes), it
   * is one of G1's humongous objects, costly to allocate anew for every task.
   */
  void close() {
    arenas[current] = out;
    SPARE.set(arenas);
  }

  /**
   * Before the record batches of the next column batch: the outputs of the last one are free
   * again, except the last output when {@code goesOn} (its records are still being decoded).
   */
  void newColumnBatch(boolean goesOn) {
    arenas[current] = out;
    if (goesOn && lastArena == current) {
      current ^= 1;
      out = arenas[current];
    }
    fill = 0;
  }

  /** The buffer the last call decompressed into: {@link #length()} bytes from {@link #start()}. */
  byte[] output() {
    return out;
  }

  int start() {
    return start;
  }

  int length() {
    return length;
  }

  void decompress(int codec, byte[] src, int offset, int size) {
    if (codec < GZIP || codec > ZSTD) {
      throw new IllegalStateException("record batch with unknown compression codec " + codec);
    }
    start = fill;
    lastArena = current;
    try {
      switch (codec) {
        case GZIP:
          length = drain(new GZIPInputStream(new ByteArrayInputStream(src, offset, size), 8192));
          break;
        case SNAPPY:
          length = snappy(src, offset, size);
          break;
        case ZSTD:
          try (ZstdInputStreamNoFinalizer in =
              new ZstdInputStreamNoFinalizer(new ByteArrayInputStream(src, offset, size))) {
            length = drain(in);
          }
          break;
        default: // LZ4
          length = drain(new LZ4FrameInputStream(new ByteArrayInputStream(src, offset, size)));
      }
    } catch (IOException | RuntimeException e) {
      // The codec libraries signal bad input with unrelated exception types.
      throw new IllegalStateException(
          "cannot decompress " + NAMES[codec] + " data: " + e.getMessage(), e);
    }
    fill = start + length;
  }

  private int snappy(byte[] src, int offset, int size) throws IOException {
    if (size < XERIAL_HEADER
        || !Arrays.equals(src, offset, offset + XERIAL_MAGIC.length, XERIAL_MAGIC, 0,
            XERIAL_MAGIC.length)) {
      return snappyBlock(src, offset, size, start);
    }
    int pos = offset + XERIAL_HEADER;
    int end = offset + size;
    int produced = 0;
    while (pos < end) {
      if (end - pos < 4) {
        throw new IOException("xerial snappy block length cut short");
      }
      int block = ((src[pos] & 0xff) << 24) | ((src[pos + 1] & 0xff) << 16)
          | ((src[pos + 2] & 0xff) << 8) | (src[pos + 3] & 0xff);
      pos += 4;
      if (block < 0 || block > end - pos) {
        throw new IOException("xerial snappy block runs past the end of the data");
      }
      produced += snappyBlock(src, pos, block, start + produced);
      pos += block;
    }
    return produced;
  }

  private int snappyBlock(byte[] src, int offset, int size, int at) throws IOException {
    int needed = Snappy.uncompressedLength(src, offset, size);
    room(at + needed);
    return Snappy.uncompress(src, offset, size, out, at);
  }

  private int drain(InputStream in) throws IOException {
    int n = start;
    while (true) {
      if (n == out.length) {
        room(n + 1);
      }
      int got = in.read(out, n, out.length - n);
      if (got < 0) {
        return n - start;
      }
      n += got;
    }
  }

  private void room(int needed) {
    if (needed > out.length) {
      out = Arrays.copyOf(out, Math.max(needed, out.length * 2));
    }
  }
}
