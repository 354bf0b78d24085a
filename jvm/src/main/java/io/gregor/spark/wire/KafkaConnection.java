package io.gregor.spark.wire;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
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
 */
public final class KafkaConnection implements AutoCloseable {
  private final Socket socket;
  private final DataInputStream in;
  private final OutputStream out;
  private final byte[] clientId;
  private final String address;
  private final ArrayDeque<Integer> inFlight = new ArrayDeque<>();
  private int correlationId;
  private byte[] answer = new byte[1 << 16];

  private KafkaConnection(Socket socket, String clientId, String address) throws IOException {
    this.socket = socket;
    this.in = new DataInputStream(socket.getInputStream());
    this.out = socket.getOutputStream();
    this.clientId = clientId == null ? null : clientId.getBytes(StandardCharsets.UTF_8);
    this.address = address;
  }

  /**
   * Connects within {@code timeoutMs}, which also bounds every later read (a broker that stops
   * answering fails the request instead of hanging the task).
   */
  public static KafkaConnection open(String host, int port, String clientId, int timeoutMs)
      throws IOException {
    String address = host + ":" + port;
    Socket socket = new Socket();
    try {
      socket.setTcpNoDelay(true);
      socket.connect(new InetSocketAddress(host, port), timeoutMs);
      socket.setSoTimeout(timeoutMs);
      return new KafkaConnection(socket, clientId, address);
    } catch (IOException e) {
      closeQuietly(socket);
      throw new LeaderUnavailable("cannot connect to " + address + ": " + e, e);
    }
  }

  /** host:port, for messages. */
  public String address() {
    return address;
  }

  /** Requests sent whose answers have not been received yet. */
  public int inFlight() {
    return inFlight.size();
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
    try {
      out.write(frame.array(), 0, frame.position());
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
      size = in.readInt();
      if (size < 4) {
        throw new IOException("answer of " + size + " bytes");
      }
      if (size > answer.length) {
        answer = new byte[Math.max(size, answer.length * 2)];
      }
      in.readFully(answer, 0, size);
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

  @Override
  public void close() {
    closeQuietly(socket);
  }

  private static void closeQuietly(Socket socket) {
    try {
      socket.close();
    } catch (IOException e) {
      // Nothing is left to do with a connection being dropped.
    }
  }
}
