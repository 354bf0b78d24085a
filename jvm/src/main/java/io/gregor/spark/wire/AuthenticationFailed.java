package io.gregor.spark.wire;

/**
 * The broker refused the credentials (or its SCRAM proof was wrong). Unchecked, unlike {@link
 * LeaderUnavailable}, because asking again cannot help: the query fails at once, as Kafka's
 * consumer fails on a SaslAuthenticationException instead of retrying it.
 */
public final class AuthenticationFailed extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  public AuthenticationFailed(String message) {
    super(message);
  }
}
