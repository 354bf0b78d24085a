package io.gregor.spark.avro;

import org.apache.spark.unsafe.types.UTF8String;

/**
 * A cursor over one Avro binary value inside a byte array: the primitive encodings of the
 * specification (zig-zag varints, little-endian floats, length-prefixed bytes), read straight
 * from the array. Apache Avro's {@code BinaryDecoder} copies each string into a {@code Utf8}
 * and each value into its own buffer first; here a string is a slice of the value's array.
 */
final class AvroInput {
  final byte[] bytes;
  int position;
  private final int limit;

  AvroInput(byte[] bytes, int position, int limit) {
    this.bytes = bytes;
    this.position = position;
    this.limit = limit;
  }

  long readLong() {
    int b = next();
    long n = b & 0x7f;
    for (int shift = 7; (b & 0x80) != 0; shift += 7) {
      if (shift > 63) {
        throw new IllegalArgumentException("an Avro varint longer than 10 bytes");
      }
      b = next();
      n |= (long) (b & 0x7f) << shift;
    }
    return (n >>> 1) ^ -(n & 1);
  }

  int readInt() {
    return (int) readLong();
  }

  boolean readBoolean() {
    return next() != 0;
  }

  float readFloat() {
    return Float.intBitsToFloat(littleEndianInt());
  }

  double readDouble() {
    long low = littleEndianInt() & 0xffffffffL;
    return Double.longBitsToDouble(low | ((long) littleEndianInt() << 32));
  }

  /** The length of the bytes or string that follows, checked against what is left. */
  int readLength() {
    return checked(readLong());
  }

  /**
   * The next string as Spark's string: a view of the value's array, not a copy (Spark's
   * binary values are never written to once made).
   */
  UTF8String readString() {
    int length = readLength();
    UTF8String text = UTF8String.fromBytes(bytes, position, length);
    position += length;
    return text;
  }

  /** Moves past {@code count} bytes, checked against what is left. */
  void skip(long count) {
    position += checked(count);
  }

  /** A copy of the next {@code length} bytes. */
  byte[] copy(int length) {
    byte[] copy = new byte[length];
    System.arraycopy(bytes, position, copy, 0, length);
    position += length;
    return copy;
  }

  private int checked(long length) {
    if (length < 0 || length > limit - position) {
      throw new IllegalArgumentException(
          "an Avro length of " + length + " with " + (limit - position) + " bytes left");
    }
    return (int) length;
  }

  private int next() {
    if (position >= limit) {
      throw new IllegalArgumentException("an Avro value ends early");
    }
    return bytes[position++] & 0xff;
  }

  private int littleEndianInt() {
    if (limit - position < 4) {
      throw new IllegalArgumentException("an Avro value ends early");
    }
    int at = position;
    position += 4;
    return (bytes[at] & 0xff) | (bytes[at + 1] & 0xff) << 8 | (bytes[at + 2] & 0xff) << 16
        | (bytes[at + 3] & 0xff) << 24;
  }
}
