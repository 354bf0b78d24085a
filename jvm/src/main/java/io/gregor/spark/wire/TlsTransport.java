package io.gregor.spark.wire;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * TLS over a blocking socket whose read timeout bounds every wait, as the plain transport's
 * selector does. The broker's certificate is checked against the trust store, and its host name
 * too unless {@code ssl.endpoint.identification.algorithm} says otherwise (Kafka's default).
 */
final class TlsTransport implements Transport {
  private final SSLSocket socket;
  private final InputStream in;
  private final OutputStream out;
  private final int timeoutMs;

  private TlsTransport(SSLSocket socket, int timeoutMs) throws IOException {
    this.socket = socket;
    this.in = socket.getInputStream();
    this.out = socket.getOutputStream();
    this.timeoutMs = timeoutMs;
  }

  static TlsTransport open(String host, int port, int timeoutMs, Security security)
      throws IOException {
    Socket plain = new Socket();
    try {
      plain.setTcpNoDelay(true);
      plain.connect(new InetSocketAddress(host, port), timeoutMs);
      plain.setSoTimeout(timeoutMs);
      SSLSocket socket =
          (SSLSocket) security.sslContext().getSocketFactory().createSocket(plain, host, port, true);
      if (security.checkHostName()) {
        SSLParameters parameters = socket.getSSLParameters();
        parameters.setEndpointIdentificationAlgorithm("HTTPS");
        socket.setSSLParameters(parameters);
      }
      socket.startHandshake();
      return new TlsTransport(socket, timeoutMs);
    } catch (IOException | RuntimeException e) {
      plain.close();
      throw e;
    }
  }

  @Override
  public void write(ByteBuffer frame) throws IOException {
    out.write(frame.array(), frame.arrayOffset() + frame.position(), frame.remaining());
    out.flush();
    frame.position(frame.limit());
  }

  @Override
  public void fill(ByteBuffer buffer) throws IOException {
    while (buffer.hasRemaining()) {
      int got = in.read(buffer.array(), buffer.arrayOffset() + buffer.position(),
          buffer.remaining());
      if (got < 0) {
        throw new IOException("connection closed by the broker");
      }
      buffer.position(buffer.position() + got);
    }
  }

  /** A read that must time out at once: anything else means closed or unasked bytes. */
  @Override
  public boolean idle() {
    if (socket.isClosed()) {
      return false;
    }
    try {
      socket.setSoTimeout(1);
      in.read();
      return false;
    } catch (SocketTimeoutException e) {
      return true;
    } catch (IOException e) {
      return false;
    } finally {
      try {
        socket.setSoTimeout(timeoutMs);
      } catch (IOException e) {
        // closed meanwhile: the next use says so
      }
    }
  }

  @Override
  public void close() {
    try {
      socket.close();
    } catch (IOException e) {
      // Nothing is left to do with a connection being dropped.
    }
  }
}
