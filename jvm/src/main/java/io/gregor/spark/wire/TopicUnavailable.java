package io.gregor.spark.wire;

/** The metadata answered a topic with an error, whose code this keeps. */
public class TopicUnavailable extends LeaderUnavailable {
  private static final long serialVersionUID = 1L;
  private final short error;

  public TopicUnavailable(String message, short error) {
    super(message);
    this.error = error;
  }

  public short error() {
    return error;
  }
}
