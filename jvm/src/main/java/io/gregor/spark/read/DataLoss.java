package io.gregor.spark.read;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The one place a read decides between failing the query and skipping lost records, for the
 * planner and the tasks alike (report_data_loss in partition_range.py, same text).
 */
public final class DataLoss {
  private static final Logger LOG = LoggerFactory.getLogger(DataLoss.class);

  private DataLoss() {}

  /** Throws with {@code fail} (failOnDataLoss=true); otherwise warns and lets the caller skip. */
  public static void report(String message, boolean fail) {
    if (fail) {
      throw new DataLossException(
          message
              + ". Some data may have been lost because it is no longer available in the topic"
              + " (retention, deletion or truncation). If you want the query to continue with"
              + " what is left, set the source option failOnDataLoss=false.");
    }
    LOG.warn("{}; skipping the missing records (failOnDataLoss=false)", message);
  }
}
