package io.gregor.spark.wire;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS and SASL of the source's connections, from the {@code kafka.*} options as the Java client
 * names them (Spark's Kafka source: {@code security.protocol}, {@code sasl.mechanism}, {@code
 * sasl.jaas.config}, {@code ssl.truststore.*}, {@code ssl.keystore.*}, {@code ssl.key.password},
 * {@code ssl.endpoint.identification.algorithm}) or as librdkafka does, which the Python source
 * and the sink take ({@code sasl.username}/{@code sasl.password}, {@code ssl.ca.location} or
 * {@code ssl.ca.pem}, {@code ssl.certificate.location}/{@code ssl.key.location}).
 *
 * <p>Built on the driver, where files named by the options are read, so that a bad option fails
 * the query there; the stores travel to the executors as bytes with each task's settings, and
 * every JVM builds its SSLContext once.
 */
public final class Security implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final Pattern JAAS_OPTION =
      Pattern.compile("([A-Za-z0-9_.$-]+)\\s*=\\s*(?:\"((?:[^\"\\\\]|\\\\.)*)\"|([^\\s;\"]+))");

  private final boolean tls;
  private final String saslMechanism;
  private final String username;
  private final String password;
  private final byte[] trustStore;
  private final String trustStoreType;
  private final String trustStorePassword;
  private final byte[] keyStore;
  private final String keyStoreType;
  private final String keyStorePassword;
  private final boolean checkHostName;
  private transient volatile SSLContext context;

  private Security(
      boolean tls,
      String saslMechanism,
      String username,
      String password,
      byte[] trustStore,
      String trustStoreType,
      String trustStorePassword,
      byte[] keyStore,
      String keyStoreType,
      String keyStorePassword,
      boolean checkHostName) {
    this.tls = tls;
    this.saslMechanism = saslMechanism;
    this.username = username;
    this.password = password;
    this.trustStore = trustStore;
    this.trustStoreType = trustStoreType;
    this.trustStorePassword = trustStorePassword;
    this.keyStore = keyStore;
    this.keyStoreType = keyStoreType;
    this.keyStorePassword = keyStorePassword;
    this.checkHostName = checkHostName;
  }

  /** The security the options ask for; null for PLAINTEXT. */
  public static Security fromConfig(Map<String, String> config) {
    String protocol = config.getOrDefault("security.protocol", "PLAINTEXT").toUpperCase(Locale.ROOT);
    if (!protocol.equals("PLAINTEXT")
        && !protocol.equals("SSL")
        && !protocol.equals("SASL_PLAINTEXT")
        && !protocol.equals("SASL_SSL")) {
      throw new IllegalArgumentException(
          "kafka.security.protocol " + protocol + " is not one of Kafka's");
    }
    if (protocol.equals("PLAINTEXT")) {
      return null;
    }
    boolean tls = protocol.endsWith("SSL");
    String mechanism = null;
    String username = "";
    String password = "";
    if (protocol.startsWith("SASL")) {
      mechanism =
          config
              .getOrDefault("sasl.mechanism", config.getOrDefault("sasl.mechanisms", "GSSAPI"))
              .toUpperCase(Locale.ROOT);
      if (!SaslClient.MECHANISMS.contains(mechanism)) {
        throw new IllegalArgumentException(
            "kafka.sasl.mechanism " + mechanism + ": only " + SaslClient.MECHANISMS + " are spoken");
      }
      Map<String, String> jaas = jaasOptions(config.getOrDefault("sasl.jaas.config", ""));
      username = config.getOrDefault("sasl.username", jaas.getOrDefault("username", ""));
      password = config.getOrDefault("sasl.password", jaas.getOrDefault("password", ""));
    }
    if (!tls) {
      return new Security(false, mechanism, username, password, null, null, null, null, null, null,
          false);
    }
    String identification =
        config.getOrDefault("ssl.endpoint.identification.algorithm", "https").strip();
    boolean checkHostName = identification.equalsIgnoreCase("https");
    byte[] trust;
    String trustType;
    if (config.containsKey("ssl.ca.pem") || config.containsKey("ssl.truststore.certificates")) {
      trust = config.getOrDefault("ssl.ca.pem", config.get("ssl.truststore.certificates"))
          .getBytes(StandardCharsets.UTF_8);
      trustType = "PEM";
    } else if (config.containsKey("ssl.ca.location")) {
      trust = read(config.get("ssl.ca.location"), "kafka.ssl.ca.location");
      trustType = "PEM";
    } else if (config.containsKey("ssl.truststore.location")) {
      trust = read(config.get("ssl.truststore.location"), "kafka.ssl.truststore.location");
      trustType = config.getOrDefault("ssl.truststore.type", "JKS").toUpperCase(Locale.ROOT);
    } else {
      trust = null;
      trustType = null;
    }
    byte[] key;
    String keyType;
    String keyPassword = config.getOrDefault("ssl.key.password", "");
    if (config.containsKey("ssl.certificate.location")) {
      String pem =
          new String(read(config.get("ssl.certificate.location"), "kafka.ssl.certificate.location"),
              StandardCharsets.UTF_8)
          + "\n"
          + new String(read(config.getOrDefault("ssl.key.location",
                  config.get("ssl.certificate.location")), "kafka.ssl.key.location"),
              StandardCharsets.UTF_8);
      key = pem.getBytes(StandardCharsets.UTF_8);
      keyType = "PEM";
    } else if (config.containsKey("ssl.keystore.location")) {
      key = read(config.get("ssl.keystore.location"), "kafka.ssl.keystore.location");
      keyType = config.getOrDefault("ssl.keystore.type", "PKCS12").toUpperCase(Locale.ROOT);
      keyPassword = config.getOrDefault("ssl.keystore.password", keyPassword);
    } else {
      key = null;
      keyType = null;
    }
    Security security = new Security(true, mechanism, username, password, trust, trustType,
        config.getOrDefault("ssl.truststore.password", ""), key, keyType, keyPassword,
        checkHostName);
    security.sslContext(); // a store that cannot be read fails the query on the driver
    return security;
  }

  public boolean tls() {
    return tls;
  }

  /** The SASL mechanism, or null without SASL. */
  public String saslMechanism() {
    return saslMechanism;
  }

  String username() {
    return username;
  }

  String password() {
    return password;
  }

  public boolean checkHostName() {
    return checkHostName;
  }

  /** What tells connections of different security apart in the pool. */
  public String poolKey() {
    return tls + "/" + saslMechanism + "/" + username;
  }

  /** This JVM's TLS context for these settings, built on first use. */
  public SSLContext sslContext() {
    SSLContext built = context;
    if (built == null) {
      try {
        built = SSLContext.getInstance("TLS");
        TrustManagerFactory trust =
            TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trustStore == null ? null : store(trustStore, trustStoreType, trustStorePassword));
        KeyManagerFactory keys = null;
        if (keyStore != null) {
          keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
          keys.init(store(keyStore, keyStoreType, keyStorePassword),
              keyStorePassword.toCharArray());
        }
        built.init(keys == null ? null : keys.getKeyManagers(), trust.getTrustManagers(), null);
      } catch (GeneralSecurityException | IOException e) {
        throw new IllegalArgumentException("the kafka.ssl.* options cannot be used: " + e, e);
      }
      context = built;
    }
    return built;
  }

  /** A key or trust store: PEM (certificates, and a PKCS#8 key for a key store) or Java's. */
  private static KeyStore store(byte[] data, String type, String password)
      throws GeneralSecurityException, IOException {
    char[] secret = password.toCharArray();
    if (!type.equals("PEM")) {
      KeyStore store = KeyStore.getInstance(type);
      store.load(new ByteArrayInputStream(data), secret);
      return store;
    }
    KeyStore store = KeyStore.getInstance("PKCS12");
    store.load(null, null);
    Certificate[] chain =
        CertificateFactory.getInstance("X.509")
            .generateCertificates(new ByteArrayInputStream(data))
            .toArray(new Certificate[0]);
    String text = new String(data, StandardCharsets.US_ASCII);
    Matcher key =
        Pattern.compile("-----BEGIN PRIVATE KEY-----([^-]*)-----END PRIVATE KEY-----").matcher(text);
    if (key.find()) {
      store.setKeyEntry("key", privateKey(Base64.getMimeDecoder().decode(key.group(1))), secret,
          chain);
    } else {
      for (int i = 0; i < chain.length; i++) {
        store.setCertificateEntry("ca-" + i, chain[i]);
      }
    }
    return store;
  }

  private static PrivateKey privateKey(byte[] pkcs8) throws GeneralSecurityException {
    GeneralSecurityException last = null;
    for (String algorithm : new String[] {"RSA", "EC"}) {
      try {
        return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(pkcs8));
      } catch (GeneralSecurityException e) {
        last = e;
      }
    }
    throw last;
  }

  /** The key="value" options of a JAAS login module entry (username, password). */
  static Map<String, String> jaasOptions(String text) {
    Map<String, String> options = new java.util.HashMap<>();
    Matcher option = JAAS_OPTION.matcher(text);
    while (option.find()) {
      String quoted = option.group(2);
      options.put(option.group(1),
          quoted != null ? quoted.replaceAll("\\\\(.)", "$1") : option.group(3));
    }
    return options;
  }

  private static byte[] read(String location, String option) {
    try {
      return Files.readAllBytes(Path.of(location));
    } catch (IOException e) {
      throw new IllegalArgumentException(option + " " + location + " cannot be read: " + e, e);
    }
  }
}
