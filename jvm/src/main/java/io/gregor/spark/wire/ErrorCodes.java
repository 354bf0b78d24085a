package io.gregor.spark.wire;

/**
 * Kafka's error codes by the names the Python source prints (kio's ErrorCode), so that a message
 * from the JVM reader reads the same as one from the Python reader.
 */
public final class ErrorCodes {
  private ErrorCodes() {}

  public static final short NONE = 0;
  public static final short OFFSET_OUT_OF_RANGE = 1;
  public static final short UNKNOWN_TOPIC_OR_PARTITION = 3;
  public static final short LEADER_NOT_AVAILABLE = 5;
  public static final short REQUEST_TIMED_OUT = 7;
  public static final short BROKER_NOT_AVAILABLE = 8;
  public static final short NOT_LEADER_OR_FOLLOWER = 6;
  public static final short REPLICA_NOT_AVAILABLE = 9;
  public static final short NETWORK_EXCEPTION = 13;
  public static final short KAFKA_STORAGE_ERROR = 56;
  public static final short FENCED_LEADER_EPOCH = 74;
  public static final short UNKNOWN_LEADER_EPOCH = 75;
  public static final short OFFSET_NOT_AVAILABLE = 78;

  // Index = code + 1 (the table starts at -1, unknown_server_error).
  private static final String[] NAMES = {
    "unknown_server_error", "none", "offset_out_of_range", "corrupt_message",
    "unknown_topic_or_partition", "invalid_fetch_size", "leader_not_available",
    "not_leader_or_follower", "request_timed_out", "broker_not_available",
    "replica_not_available", "message_too_large", "stale_controller_epoch",
    "offset_metadata_too_large", "network_exception", "coordinator_load_in_progress",
    "coordinator_not_available", "not_coordinator", "invalid_topic_exception",
    "record_list_too_large", "not_enough_replicas", "not_enough_replicas_after_append",
    "invalid_required_acks", "illegal_generation", "inconsistent_group_protocol",
    "invalid_group_id", "unknown_member_id", "invalid_session_timeout", "rebalance_in_progress",
    "invalid_commit_offset_size", "topic_authorization_failed", "group_authorization_failed",
    "cluster_authorization_failed", "invalid_timestamp", "unsupported_sasl_mechanism",
    "illegal_sasl_state", "unsupported_version", "topic_already_exists", "invalid_partitions",
    "invalid_replication_factor", "invalid_replica_assignment", "invalid_config",
    "not_controller", "invalid_request", "unsupported_for_message_format", "policy_violation",
    "out_of_order_sequence_number", "duplicate_sequence_number", "invalid_producer_epoch",
    "invalid_txn_state", "invalid_producer_id_mapping", "invalid_transaction_timeout",
    "concurrent_transactions", "transaction_coordinator_fenced",
    "transactional_id_authorization_failed", "security_disabled", "operation_not_attempted",
    "kafka_storage_error", "log_dir_not_found", "sasl_authentication_failed",
    "unknown_producer_id", "reassignment_in_progress", "delegation_token_auth_disabled",
    "delegation_token_not_found", "delegation_token_owner_mismatch",
    "delegation_token_request_not_allowed", "delegation_token_authorization_failed",
    "delegation_token_expired", "invalid_principal_type", "non_empty_group",
    "group_id_not_found", "fetch_session_id_not_found", "invalid_fetch_session_epoch",
    "listener_not_found", "topic_deletion_disabled", "fenced_leader_epoch",
    "unknown_leader_epoch", "unsupported_compression_type", "stale_broker_epoch",
    "offset_not_available", "member_id_required", "preferred_leader_not_available",
    "group_max_size_reached", "fenced_instance_id", "eligible_leaders_not_available",
    "election_not_needed", "no_reassignment_in_progress", "group_subscribed_to_topic",
    "invalid_record", "unstable_offset_commit", "throttling_quota_exceeded", "producer_fenced",
    "resource_not_found", "duplicate_resource", "unacceptable_credential",
    "inconsistent_voter_set", "invalid_update_version", "feature_update_failed",
    "principal_deserialization_failure", "snapshot_not_found", "position_out_of_range",
    "unknown_topic_id", "duplicate_broker_registration", "broker_id_not_registered",
    "inconsistent_topic_id", "inconsistent_cluster_id", "transactional_id_not_found",
    "fetch_session_topic_id_error", "ineligible_replica", "new_leader_elected",
    "offset_moved_to_tiered_storage", "fenced_member_epoch", "unreleased_instance_id",
    "unsupported_assignor", "stale_member_epoch", "mismatched_endpoint_type",
    "unsupported_endpoint_type", "unknown_controller_id", "unknown_subscription_id",
    "telemetry_too_large", "invalid_registration", "transaction_abortable",
    "invalid_record_state", "share_session_not_found", "invalid_share_session_epoch",
    "fenced_state_epoch", "invalid_voter_key", "duplicate_voter", "voter_not_found",
    "invalid_regular_expression", "rebootstrap_required", "streams_invalid_topology",
    "streams_invalid_topology_epoch", "streams_topology_fenced", "share_session_limit_reached",
  };

  /** The name of an error code, or "error_N" for one this table does not know. */
  public static String name(short code) {
    int index = code + 1;
    return index >= 0 && index < NAMES.length ? NAMES[index] : "error_" + code;
  }

  /**
   * Errors after which the partition's leader may be elsewhere: ask the metadata again and retry
   * (the same set as partition_reader.py's _LEADER_MOVED).
   */
  public static boolean leaderMoved(short code) {
    switch (code) {
      case NOT_LEADER_OR_FOLLOWER:
      case LEADER_NOT_AVAILABLE:
      case FENCED_LEADER_EPOCH:
      case UNKNOWN_LEADER_EPOCH:
      case UNKNOWN_TOPIC_OR_PARTITION:
      case REPLICA_NOT_AVAILABLE:
      case KAFKA_STORAGE_ERROR:
      case OFFSET_NOT_AVAILABLE:
        return true;
      default:
        return false;
    }
  }

  /**
   * Errors worth asking again (after a new look at the metadata): the leader moved or is not
   * there yet, or the broker could not answer in time. The rest (an unknown topic, an
   * authorization or version error...) would be answered the same way however often asked,
   * as Kafka's clients know them apart (RetriableException).
   */
  public static boolean retriable(short code) {
    return leaderMoved(code)
        || code == REQUEST_TIMED_OUT
        || code == BROKER_NOT_AVAILABLE
        || code == NETWORK_EXCEPTION;
  }
}
