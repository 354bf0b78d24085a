package io.gregor.spark.wire;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** A request body being written: big-endian primitives and Kafka's non-flexible strings. */
final class RequestBuffer {
  private byte[] bytes = new byte[128];
  private int size;

  RequestBuffer int8(int v) {
    room(1);
    bytes[size++] = (byte) v;
    return this;
  }

  RequestBuffer int16(int v) {
    room(2);
    bytes[size++] = (byte) (v >>> 8);
    bytes[size++] = (byte) v;
    return this;
  }

  RequestBuffer int32(int v) {
    room(4);
    for (int shift = 24; shift >= 0; shift -= 8) {
      bytes[size++] = (byte) (v >>> shift);
    }
    return this;
  }

  RequestBuffer int64(long v) {
    room(8);
    for (int shift = 56; shift >= 0; shift -= 8) {
      bytes[size++] = (byte) (v >>> shift);
    }
    return this;
  }

  /** A STRING (int16 length); null is written as length -1 (NULLABLE_STRING). */
  RequestBuffer string(String s) {
    if (s == null) {
      return int16(-1);
    }
    byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
    int16(utf8.length);
    room(utf8.length);
    System.arraycopy(utf8, 0, bytes, size, utf8.length);
    size += utf8.length;
    return this;
  }

  ByteBuffer toByteBuffer() {
    return ByteBuffer.wrap(bytes, 0, size);
  }

  private void room(int n) {
    if (size + n > bytes.length) {
      bytes = Arrays.copyOf(bytes, Math.max(bytes.length * 2, size + n));
    }
  }
}
