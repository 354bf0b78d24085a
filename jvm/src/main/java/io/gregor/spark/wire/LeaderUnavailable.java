package io.gregor.spark.wire;

import java.io.IOException;

/**
 * No usable connection to a partition's leader right now (refused, closed, timed out, or the
 * metadata names none); the metadata may say another leader after the retry backoff. An
 * IOException because that is what the socket errors it wraps are.
 */
public class LeaderUnavailable extends IOException {
  private static final long serialVersionUID = 1L;

  public LeaderUnavailable(String message) {
    super(message);
  }

  public LeaderUnavailable(String message, Throwable cause) {
    super(message, cause);
  }
}
