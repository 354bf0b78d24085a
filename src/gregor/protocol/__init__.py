"""Kafka wire protocol: frames, message codecs (kio underneath) and record batches. No IO."""
