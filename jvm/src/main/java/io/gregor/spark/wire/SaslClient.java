package io.gregor.spark.wire;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * SASL authentication of a new connection as Kafka's Java client does it: SaslHandshake v1,
 * then the mechanism's tokens in SaslAuthenticate v1. PLAIN and SCRAM-SHA-256/512 (RFC 5802,
 * 7677; the server's signature is checked, so a broker that does not know the password is not
 * believed). The JDK has no SCRAM client, hence this one.
 */
final class SaslClient {
  static final List<String> MECHANISMS = List.of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512");
  private static final short SASL_HANDSHAKE = 17;
  private static final short SASL_AUTHENTICATE = 36;
  private static final SecureRandom RANDOM = new SecureRandom();

  private SaslClient() {}

  /** Authenticates {@code connection}; LeaderUnavailable with the broker's reason if refused. */
  static void authenticate(KafkaConnection connection, Security security)
      throws LeaderUnavailable {
    String mechanism = security.saslMechanism();
    ByteBuffer handshake =
        connection.roundTrip(
            SASL_HANDSHAKE, (short) 1, new RequestBuffer().string(mechanism).toByteBuffer());
    short error = handshake.getShort();
    if (error != ErrorCodes.NONE) {
      throw refused(connection, "mechanism " + mechanism + " is not enabled there ("
          + ErrorCodes.name(error) + ")");
    }
    if (mechanism.equals("PLAIN")) {
      token(connection, ("\0" + security.username() + "\0" + security.password())
          .getBytes(StandardCharsets.UTF_8));
      return;
    }
    String hash = mechanism.equals("SCRAM-SHA-256") ? "SHA-256" : "SHA-512";
    String hmac = mechanism.equals("SCRAM-SHA-256") ? "HmacSHA256" : "HmacSHA512";
    byte[] nonceBytes = new byte[24];
    RANDOM.nextBytes(nonceBytes);
    String nonce = Base64.getEncoder().encodeToString(nonceBytes);
    String user = security.username().replace("=", "=3D").replace(",", "=2C");
    String clientFirstBare = "n=" + user + ",r=" + nonce;
    String serverFirst =
        new String(token(connection, ("n,," + clientFirstBare).getBytes(StandardCharsets.UTF_8)),
            StandardCharsets.UTF_8);
    Map<String, String> fields = attributes(serverFirst);
    String serverNonce = fields.get("r");
    if (serverNonce == null || !serverNonce.startsWith(nonce) || !fields.containsKey("s")
        || !fields.containsKey("i")) {
      throw refused(connection, "unexpected SCRAM server-first message");
    }
    try {
      byte[] salted =
          hi(hmac, security.password().getBytes(StandardCharsets.UTF_8),
              Base64.getDecoder().decode(fields.get("s")), Integer.parseInt(fields.get("i")));
      String withoutProof = "c=biws,r=" + serverNonce;
      byte[] auth = (clientFirstBare + "," + serverFirst + "," + withoutProof)
          .getBytes(StandardCharsets.UTF_8);
      byte[] clientKey = mac(hmac, salted, "Client Key".getBytes(StandardCharsets.UTF_8));
      byte[] storedKey = MessageDigest.getInstance(hash).digest(clientKey);
      byte[] signature = mac(hmac, storedKey, auth);
      byte[] proof = new byte[clientKey.length];
      for (int i = 0; i < proof.length; i++) {
        proof[i] = (byte) (clientKey[i] ^ signature[i]);
      }
      String clientFinal = withoutProof + ",p=" + Base64.getEncoder().encodeToString(proof);
      String serverFinal = new String(
          token(connection, clientFinal.getBytes(StandardCharsets.UTF_8)), StandardCharsets.UTF_8);
      byte[] serverKey = mac(hmac, salted, "Server Key".getBytes(StandardCharsets.UTF_8));
      String expected = Base64.getEncoder().encodeToString(mac(hmac, serverKey, auth));
      if (!expected.equals(attributes(serverFinal).get("v"))) {
        throw refused(connection, "the broker's SCRAM signature is wrong");
      }
    } catch (GeneralSecurityException | IllegalArgumentException e) {
      throw refused(connection, "SCRAM: " + e);
    }
  }

  /** One SaslAuthenticate v1 round trip: the broker's token, or its refusal. */
  private static byte[] token(KafkaConnection connection, byte[] token) throws LeaderUnavailable {
    RequestBuffer body = new RequestBuffer().int32(token.length);
    ByteBuffer request = ByteBuffer.allocate(4 + token.length);
    request.put(body.toByteBuffer()).put(token).flip();
    ByteBuffer answer = connection.roundTrip(SASL_AUTHENTICATE, (short) 1, request);
    short error = answer.getShort();
    String message = Answers.string(answer);
    if (error != ErrorCodes.NONE) {
      throw refused(connection, ErrorCodes.name(error) + (message == null ? "" : ": " + message));
    }
    byte[] reply = new byte[answer.getInt()];
    answer.get(reply);
    return reply;
  }

  private static Map<String, String> attributes(String message) {
    Map<String, String> fields = new HashMap<>();
    for (String part : message.split(",")) {
      int equals = part.indexOf('=');
      if (equals == 1) {
        fields.put(part.substring(0, 1), part.substring(2));
      }
    }
    return fields;
  }

  /** RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC, one block. */
  private static byte[] hi(String hmac, byte[] password, byte[] salt, int iterations)
      throws GeneralSecurityException {
    byte[] first = new byte[salt.length + 4];
    System.arraycopy(salt, 0, first, 0, salt.length);
    first[first.length - 1] = 1;
    Mac mac = Mac.getInstance(hmac);
    mac.init(new SecretKeySpec(password, hmac));
    byte[] u = mac.doFinal(first);
    byte[] result = u.clone();
    for (int i = 1; i < iterations; i++) {
      u = mac.doFinal(u);
      for (int j = 0; j < result.length; j++) {
        result[j] ^= u[j];
      }
    }
    return result;
  }

  private static byte[] mac(String hmac, byte[] key, byte[] data)
      throws GeneralSecurityException {
    Mac mac = Mac.getInstance(hmac);
    mac.init(new SecretKeySpec(key, hmac));
    return mac.doFinal(data);
  }

  private static AuthenticationFailed refused(KafkaConnection connection, String why) {
    connection.close();
    return new AuthenticationFailed(connection.address() + ": SASL authentication failed: " + why);
  }
}
