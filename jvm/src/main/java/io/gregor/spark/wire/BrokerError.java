package io.gregor.spark.wire;

/**
 * An error the cluster will answer again however often it is asked (an unknown topic, an
 * authorization or version error): unlike {@link LeaderUnavailable}, not worth a retry.
 */
public class BrokerError extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public BrokerError(String message) {
    super(message);
  }
}
