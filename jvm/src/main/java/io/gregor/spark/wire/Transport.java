package io.gregor.spark.wire;

import java.io.IOException;
import java.nio.ByteBuffer;

/** How a {@link KafkaConnection}'s bytes reach the broker: plain TCP or TLS. */
interface Transport {
  /** Writes the whole buffer (its position to its limit). */
  void write(ByteBuffer frame) throws IOException;

  /** Reads until {@code buffer} (backed by an array) is full. */
  void fill(ByteBuffer buffer) throws IOException;

  /** Open, and the broker has sent nothing unasked (nor closed it while idle). */
  boolean idle();

  void close();
}
