"""Metric names: what the JMX exporter's example Kafka rules (``kafka-2_0_0.yml``, with
``lowercaseOutputName``) make of Kafka's MBeans, and what kafka_exporter calls group
offsets, so that existing Kafka dashboards and alerts find them.

``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T`` (a meter's
``Count``) becomes ``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}``; a
gauge's ``Value`` keeps its name, lowercased; a Kafka histogram becomes a Prometheus
histogram of the same name (the exporter's ``_count`` series is among its series).
"""

from __future__ import annotations

from gregor.protocol.api_keys import ApiKey

# kafka.server:type=BrokerTopicMetrics (per topic, and without a topic label for all)
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout"
REPLICATION_BYTES_OUT = "kafka_server_brokertopicmetrics_replicationbytesout"
TOTAL_PRODUCE_REQUESTS = "kafka_server_brokertopicmetrics_totalproducerequests"
FAILED_PRODUCE_REQUESTS = "kafka_server_brokertopicmetrics_failedproducerequests"
TOTAL_FETCH_REQUESTS = "kafka_server_brokertopicmetrics_totalfetchrequests"
FAILED_FETCH_REQUESTS = "kafka_server_brokertopicmetrics_failedfetchrequests"

# kafka.network:type=RequestMetrics,request=<Kafka's API name>
REQUESTS = "kafka_network_requestmetrics_requests"  # counter, with version
ERRORS = "kafka_network_requestmetrics_errors"  # counter, with error (NONE included)
TOTAL_TIME_MS = "kafka_network_requestmetrics_totaltimems"  # histogram
REQUEST_QUEUE_TIME_MS = "kafka_network_requestmetrics_requestqueuetimems"  # histogram

# kafka.network:type=SocketServer: the share of time the network threads wait for
# sockets; here the event loop's share of time waiting in select.
NETWORK_PROCESSOR_IDLE = "kafka_network_socketserver_networkprocessoravgidlepercent"
# No Kafka MBean has these: the event loop's own health.
LOOP_IDLE_SECONDS = "gregor_eventloop_idle_seconds"
LOOP_LAG_SECONDS = "gregor_eventloop_lag_seconds"

# kafka.log:type=Log,topic=T,partition=P
LOG_SIZE = "kafka_log_log_size"
LOG_START_OFFSET = "kafka_log_log_logstartoffset"
LOG_END_OFFSET = "kafka_log_log_logendoffset"
LOG_SEGMENTS = "kafka_log_log_numlogsegments"

# kafka.server:type=ReplicaManager
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
PARTITION_COUNT = "kafka_server_replicamanager_partitioncount"
LEADER_COUNT = "kafka_server_replicamanager_leadercount"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands"
# kafka.cluster:type=Partition,name=UnderReplicated,topic=T,partition=P
PARTITION_UNDER_REPLICATED = "kafka_cluster_partition_underreplicated"

# kafka.controller:type=KafkaController / ControllerStats
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
OFFLINE_PARTITIONS = "kafka_controller_kafkacontroller_offlinepartitionscount"
GLOBAL_TOPICS = "kafka_controller_kafkacontroller_globaltopiccount"
GLOBAL_PARTITIONS = "kafka_controller_kafkacontroller_globalpartitioncount"
# A timer, which the exporter's rules render as a summary: the elections are its _count.
LEADER_ELECTIONS = "kafka_controller_controllerstats_leaderelectionrateandtimems"
UNCLEAN_LEADER_ELECTIONS = "kafka_controller_controllerstats_uncleanleaderelections"

# kafka.coordinator.group:type=GroupMetadataManager
GROUP_MANAGER = "kafka_coordinator_group_groupmetadatamanager_"
NUM_GROUPS = GROUP_MANAGER + "numgroups"
NUM_OFFSETS = GROUP_MANAGER + "numoffsets"
# NumGroupsStable, NumGroupsPreparingRebalance, ... by Kafka's state names.
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


def num_groups_in(state: str) -> str:
    return NUM_GROUPS + state.lower()


# kafka_exporter (consumergroup, topic, partition); lead as Kafka's consumer names it
GROUP_CURRENT_OFFSET = "kafka_consumergroup_current_offset"
GROUP_CURRENT_OFFSET_SUM = "kafka_consumergroup_current_offset_sum"
GROUP_LAG = "kafka_consumergroup_lag"
GROUP_LAG_SUM = "kafka_consumergroup_lag_sum"
GROUP_LEAD = "kafka_consumergroup_lead"
GROUP_MEMBERS = "kafka_consumergroup_members"


def request_name(api_key: int) -> str:
    """Kafka's name of an API (ApiKeys.name): OFFSET_FOR_LEADER_EPOCH -> OffsetForLeaderEpoch."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return f"ApiKey{api_key}"
    return "".join(word.capitalize() for word in name.split("_"))


# Fetch is also counted as one of these (Kafka's RequestMetrics does both).
FETCH_CONSUMER = "FetchConsumer"
FETCH_FOLLOWER = "FetchFollower"
