package io.gregor.spark.wire;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;

/**
 * One blocking connection to one broker, speaking request header v1 (non-flexible). Requests may
 * be pipelined (send, send, receive, receive): a reader sends its next Fetch before it decodes the
 * last answer, so the broker reads and sends meanwhile. Answers come back in order.
 *
 * <p>Answers are read into one buffer that is reused: a buffer returned by {@link #receive} is
 * valid until the next receive on this connection. A fetch answer of several megabytes is thus
 * not allocated again for every request.
 *
 * <p>The socket is a non-blocking channel that waits in a selector only when nothing is there to
 * read: a Socket's stream with a read timeout reads at most 128 KiB a call and polls before each,
 * which cost half as much again CPU per byte received (measured on loopback); the selector keeps
 * the timeout, so a broker that stops answering fails the request instead of hanging the task.
 */
public final class KafkaConnection implements AutoCloseable {
  private final SocketChannel channel;
  private final Selector selector;
  private final SelectionKey key;
  private final int timeoutMs;
  private final byte[] clientId;
  private final String address;
  private final ArrayDeque<Integer> inFlight = new ArrayDeque<>();
  private final ByteBuffer sizeField = ByteBuffer.allocate(4);
  private int correlationId;
  private byte[] answer;

  /**
   * The answer buffer a closed connection leaves to the next one of its thread. A task's buffer
   * grows to a whole fetch answer (megabytes): allocated anew for every task, such arrays are
   * G1's humongous objects, and each one set off a young collection and a marking cycle.
   * Executors run tasks on pooled threads, so the next task of the thread takes it over.
   */
  private static final ThreadLocal<byte[]> SPARE_ANSWER = new ThreadLocal<>();

  private KafkaConnection(SocketChannel channel, Selector selector, int timeoutMs,
      String clientId, String address) throws IOException {
    this.channel = channel;
    this.selector = selector;
    this.key = channel.register(selector, 0);
    this.timeoutMs = timeoutMs;
    this.clientId = clientId == null ? null : clientId.getBytes(StandardCharsets.UTF_8);
    this.address = address;
    byte[] spare = SPARE_ANSWER.get();
    SPARE_ANSWER.remove();
    this.answer = spare != null ? spare : new byte[1 << 16];
  }

  /**
   * Connects within {@code timeoutMs}, which also bounds every later wait for the broker (a
   * broker that stops answering fails the request instead of hanging the task).
   */
  public static KafkaConnection open(String host, int port, String clientId, int timeoutMs)
      throws LeaderUnavailable {
    String address = host + ":" + port;
    SocketChannel channel = null;
    Selector selector = null;
    try {
      channel = SocketChannel.open();
      channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
      channel.socket().connect(new InetSocketAddress(host, port), timeoutMs);
      channel.configureBlocking(false);
      selector = Selector.open();
      return new KafkaConnection(channel, selector, timeoutMs, clientId, address);
    } catch (IOException e) {
      closeQuietly(channel, selector);
      throw new LeaderUnavailable("cannot connect to " + address + ": " + e, e);
    }
  }

  /** Sends one request (the body from its position to its limit) without waiting for it. */
  public void send(short apiKey, short version, ByteBuffer body) throws LeaderUnavailable {
    int id = ++correlationId;
    int idLength = clientId == null ? 0 : clientId.length;
    int frameSize = 2 + 2 + 4 + 2 + idLength + body.remaining();
    ByteBuffer frame = ByteBuffer.allocate(4 + frameSize);
    frame.putInt(frameSize).putShort(apiKey).putShort(version).putInt(id);
    if (clientId == null) {
      frame.putShort((short) -1);
    } else {
      frame.putShort((short) idLength).put(clientId);
    }
    frame.put(body.duplicate());
    frame.flip();
    try {
      while (frame.hasRemaining()) {
        if (channel.write(frame) == 0) {
          await(SelectionKey.OP_WRITE);
        }
      }
    } catch (IOException e) {
      throw new LeaderUnavailable("sending a request to " + address + " failed: " + e, e);
    }
    inFlight.addLast(id);
  }

  /**
   * The answer to the oldest request sent, after its correlation id; valid until the next
   * receive on this connection.
   */
  public ByteBuffer receive() throws LeaderUnavailable {
    Integer expected = inFlight.pollFirst();
    if (expected == null) {
      throw new IllegalStateException("receive without a request in flight");
    }
    int size;
    try {
      sizeField.clear();
      fill(sizeField);
      size = sizeField.getInt(0);
      if (size < 4) {
        throw new IOException("answer of " + size + " bytes");
      }
      if (size > answer.length) {
        answer = new byte[Math.max(size, answer.length * 2)];
      }
      fill(ByteBuffer.wrap(answer, 0, size));
    } catch (IOException e) {
      throw new LeaderUnavailable("reading an answer from " + address + " failed: " + e, e);
    }
    ByteBuffer body = ByteBuffer.wrap(answer, 0, size);
    int correlation = body.getInt();
    if (correlation != expected) {
      throw new LeaderUnavailable("answer " + correlation + " to request " + expected);
    }
    return body.slice();
  }

  /** One request and its answer (valid until the next receive). */
  public ByteBuffer roundTrip(short apiKey, short version, ByteBuffer body)
      throws LeaderUnavailable {
    send(apiKey, version, body);
    return receive();
  }

  /** Reads until {@code buffer} is full, waiting in the selector only when nothing is there. */
  private void fill(ByteBuffer buffer) throws IOException {
    while (buffer.hasRemaining()) {
      int got = channel.read(buffer);
      if (got < 0) {
        throw new IOException("connection closed by the broker");
      }
      if (got == 0) {
        await(SelectionKey.OP_READ);
      }
    }
  }

  private void await(int operation) throws IOException {
    key.interestOps(operation);
    int ready = selector.select(timeoutMs);
    selector.selectedKeys().clear();
    key.interestOps(0);
    if (ready == 0) {
      throw new SocketTimeoutException("no answer within " + timeoutMs + " ms");
    }
  }

  /** host:port as connected to (what a pooled connection is kept by, with the settings). */
  String address() {
    return address;
  }

  /**
   * Whether the connection can take a request from another user: nothing in flight, and the
   * broker has not closed it meanwhile (an idle broker connection is closed after the
   * broker's connections.max.idle.ms) nor sent anything unasked.
   */
  boolean reusable() {
    if (!inFlight.isEmpty() || !channel.isOpen()) {
      return false;
    }
    try {
      sizeField.clear();
      return channel.read(sizeField) == 0;
    } catch (IOException e) {
      return false;
    }
  }

  /** Closes the connection; its answer buffer (which must no longer be used) goes spare. */
  @Override
  public void close() {
    closeQuietly(channel, selector);
    byte[] spare = SPARE_ANSWER.get();
    if (spare == null || spare.length < answer.length) {
      SPARE_ANSWER.set(answer);
    }
  }

  private static void closeQuietly(SocketChannel channel, Selector selector) {
    try {
      if (selector != null) {
        selector.close();
      }
      if (channel != null) {
        channel.close();
      }
    } catch (IOException e) {
      // Nothing is left to do with a connection being dropped.
    }
  }
}
