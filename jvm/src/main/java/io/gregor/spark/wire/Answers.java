package io.gregor.spark.wire;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** Reading the non-flexible encodings of answers (the buffers are big-endian, as Kafka's). */
final class Answers {
  private Answers() {}

  /** A STRING or NULLABLE_STRING (int16 length, -1 for null). */
  static String string(ByteBuffer b) {
    int length = b.getShort();
    if (length < 0) {
      return null;
    }
    String s;
    if (b.hasArray()) {
      s = new String(b.array(), b.arrayOffset() + b.position(), length, StandardCharsets.UTF_8);
    } else {
      byte[] raw = new byte[length];
      b.duplicate().get(raw);
      s = new String(raw, StandardCharsets.UTF_8);
    }
    b.position(b.position() + length);
    return s;
  }

  /** Skips an ARRAY of INT32 (int32 count, -1 for null). */
  static void skipInt32s(ByteBuffer b) {
    int count = b.getInt();
    if (count > 0) {
      b.position(b.position() + 4 * count);
    }
  }
}
