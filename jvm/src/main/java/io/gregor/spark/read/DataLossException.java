package io.gregor.spark.read;

/** Records a query was due to read are gone (retention, deletion or truncation). */
public final class DataLossException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public DataLossException(String message) {
    super(message);
  }
}
