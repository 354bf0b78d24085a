package io.gregor.spark.wire;

import java.io.IOException;
import java.nio.ByteBuffer;
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
 * <p>The bytes go through a {@link Transport}: a plain socket channel ({@link PlainTransport}) or
 * TLS ({@link TlsTransport}).
 */
public final class KafkaConnection implements AutoCloseable {
  private final Transport transport;
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

  private KafkaConnection(Transport transport, String clientId, String address) {
    this.transport = transport;
    this.clientId = clientId == null ? null : clientId.getBytes(StandardCharsets.UTF_8);
    this.address = address;
    byte[] spare = SPARE_ANSWER.get();
    SPARE_ANSWER.remove();
    this.answer = spare != null ? spare : new byte[1 << 16];
  }

  /**
   * Connects within {@code timeoutMs}, which also bounds every later wait for the broker (a
   * broker that stops answering fails the request instead of hanging the task); with TLS and
   * SASL when {@code security} (null: PLAINTEXT) asks for them. A refused authentication is an
   * {@link AuthenticationFailed}.
   */
  public static KafkaConnection open(
      String host, int port, String clientId, int timeoutMs, Security security)
      throws LeaderUnavailable {
    String address = host + ":" + port;
    Transport transport;
    try {
      transport = security != null && security.tls()
          ? TlsTransport.open(host, port, timeoutMs, security)
          : PlainTransport.open(host, port, timeoutMs);
    } catch (IOException e) {
      throw new LeaderUnavailable("cannot connect to " + address + ": " + e, e);
    }
    KafkaConnection connection = new KafkaConnection(transport, clientId, address);
    if (security != null && security.saslMechanism() != null) {
      try {
        SaslClient.authenticate(connection, security);
      } catch (LeaderUnavailable | RuntimeException e) {
        connection.close();
        throw e;
      }
    }
    return connection;
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
      transport.write(frame);
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
      transport.fill(sizeField);
      size = sizeField.getInt(0);
      if (size < 4) {
        throw new IOException("answer of " + size + " bytes");
      }
      if (size > answer.length) {
        answer = new byte[Math.max(size, answer.length * 2)];
      }
      transport.fill(ByteBuffer.wrap(answer, 0, size));
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
    return inFlight.isEmpty() && transport.idle();
  }

  /** Closes the connection; its answer buffer (which must no longer be used) goes spare. */
  @Override
  public void close() {
    transport.close();
    byte[] spare = SPARE_ANSWER.get();
    if (spare == null || spare.length < answer.length) {
      SPARE_ANSWER.set(answer);
    }
  }
}
