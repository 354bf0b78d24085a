"""Topic administration through unchanged admin clients: confluent-kafka's AdminClient,
kafka-python's KafkaAdminClient and kcat's metadata listing.

Each client negotiates its own API versions (librdkafka prefers the newest flexible
ones, kafka-python 3 its own maximum), so both are exercised for every operation.
"""

from __future__ import annotations

import datetime
import json
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator

import kafka.errors
import pytest
from clients import (
    BASE_TIMESTAMP,
    TIMEOUT,
    WireConnection,
    advertised_versions,
    alter_broker_configs,
    versioned_request,
)
from confluent_kafka import (
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka import TopicPartitionReplica as KpTopicPartitionReplica
from kafka.admin import ACLFilter as KpACLFilter
from kafka.admin import ACLOperation as KpACLOperation
from kafka.admin import ACLPermissionType as KpACLPermissionType
from kafka.admin import ACLResourcePatternType as KpACLResourcePatternType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.admin import OffsetSpec as KpOffsetSpec
from kafka.admin import ResourcePatternFilter as KpResourcePatternFilter
from kafka.admin import ResourceType as KpResourceType

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


# ----------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap,
                              request_timeout_ms=int(TIMEOUT * 1000))
    yield client
    client.close()


def _error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def _create(admin: AdminClient, name: str, partitions: int = 1, **configs: str) -> None:
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(TIMEOUT)


def _topic_configs(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


# ------------------------------------------------------ confluent AdminClient
def test_confluent_create_list_describe_delete(admin: AdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(TIMEOUT)

    metadata = admin.list_topics(timeout=TIMEOUT)
    assert sorted(metadata.topics[topic_name].partitions) == [0, 1, 2]
    assert metadata.topics[topic_name].error is None
    assert metadata.controller_id == next(iter(metadata.brokers))

    description = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result(TIMEOUT)
    assert description.name == topic_name
    assert not description.is_internal
    assert [p.id for p in description.partitions] == [0, 1, 2]
    assert all(p.leader.id == metadata.controller_id and [r.id for r in p.replicas]
               == [metadata.controller_id] for p in description.partitions)

    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT)
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics


def test_confluent_recreate_deleted_topic_starts_empty(admin: AdminClient, broker: BrokerProcess,
                                                       topic_name: str) -> None:
    def produce(value: bytes) -> int:
        offsets: list[int] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic_name, value=value, partition=0,
                         on_delivery=lambda _, m: offsets.append(m.offset()))
        assert producer.flush(TIMEOUT) == 0
        return offsets[0]

    _create(admin, topic_name, 2)
    assert [produce(b"old") for _ in range(3)] == [0, 1, 2]
    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT)
    _create(admin, topic_name, 1)
    assert produce(b"new") == 0
    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == 1


def test_confluent_create_with_broker_defaults(admin: AdminClient, topic_name: str) -> None:
    """CreateTopics v4+: -1 partitions and replication factor mean the broker's defaults."""
    admin.create_topics([NewTopic(topic_name)])[topic_name].result(TIMEOUT)
    partitions = admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions
    assert [len(p.replicas) for p in partitions.values()] == [1]


def test_confluent_create_with_replica_assignment(admin: AdminClient, topic_name: str) -> None:
    """A manual assignment naming the broker's own placement is honoured."""
    broker_id = admin.describe_cluster().result(TIMEOUT).nodes[0].id
    admin.create_topics([NewTopic(topic_name, 3, replica_assignment=[[broker_id]] * 3)])[
        topic_name].result(TIMEOUT)
    partitions = admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions
    assert {p: m.replicas for p, m in partitions.items()} == {p: [broker_id] for p in range(3)}


def test_confluent_create_errors(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name)
    futures = admin.create_topics([
        NewTopic(topic_name, 1, 1),
        NewTopic("bad name!", 1, 1),
        NewTopic(topic_name + "-huge", 100_000, 1),
        NewTopic(topic_name + "-zero", 0, 1),
        NewTopic(topic_name + "-rf", 1, 3),
        NewTopic(topic_name + "-cfg", 1, 1, config={"cleanup.policy": "shred"}),
        NewTopic(topic_name + "-away", 2, replica_assignment=[[1], [7]]),
    ])
    codes = {name: _error_of(future).code() for name, future in futures.items()}
    assert codes == {
        topic_name: KafkaError.TOPIC_ALREADY_EXISTS,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        topic_name + "-huge": KafkaError.INVALID_PARTITIONS,
        topic_name + "-zero": KafkaError.INVALID_PARTITIONS,
        topic_name + "-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        topic_name + "-cfg": KafkaError.INVALID_CONFIG,
        topic_name + "-away": KafkaError.INVALID_REPLICA_ASSIGNMENT,
    }
    assert set(admin.list_topics(timeout=TIMEOUT).topics) & set(codes) == {topic_name}


def test_confluent_validate_only_changes_nothing(admin: AdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True)[topic_name].result(
        TIMEOUT)
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics

    _create(admin, topic_name, 2)
    admin.create_partitions([NewPartitions(topic_name, 5)],
                            validate_only=True)[topic_name].result(TIMEOUT)
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], validate_only=True)[resource].result(TIMEOUT)

    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == 2
    assert _topic_configs(admin, topic_name)["retention.ms"].value == "604800000"


def test_confluent_delete_unknown_topic(admin: AdminClient, topic_name: str) -> None:
    error = _error_of(admin.delete_topics([topic_name])[topic_name])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_create_partitions(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 2)
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(TIMEOUT)
    assert sorted(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == [0, 1, 2, 3]

    error = _error_of(admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name])
    assert error.code() == KafkaError.INVALID_PARTITIONS


@pytest.mark.parametrize("assignment", [[[1]], [[1], [1], [1]], [[1], [7]], [[1, 1], [1, 1]]],
                         ids=["too-few", "too-many", "unknown-broker", "broker-twice"])
def test_confluent_create_partitions_with_a_wrong_assignment(admin: AdminClient, topic_name: str,
                                                             assignment: list[list[int]]) -> None:
    _create(admin, topic_name, 2)
    error = _error_of(admin.create_partitions([NewPartitions(
        topic_name, 4, replica_assignment=assignment)])[topic_name])
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == 2


def test_kafka_python_create_partitions_with_an_assignment(kp_admin: KafkaAdminClient,
                                                           topic_name: str) -> None:
    """As kafka-python's own admin test does it, on this broker's id."""
    kp_admin.create_topics([KpNewTopic(topic_name, 2, 1)])
    kp_admin.create_partitions({topic_name: KpNewPartitions(4, [[1], [1]])})
    (description,) = kp_admin.describe_topics([topic_name])
    assert sorted((p["partition_index"], p["replica_nodes"])
                  for p in description["partitions"]) == [
        (0, [1]), (1, [1]), (2, [1]), (3, [1])]


def test_confluent_describe_configs(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 1, **{"retention.ms": "60000", "cleanup.policy": "compact"})
    configs = _topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default
    assert configs["max.message.bytes"].value == "1048588"

    broker_resource = ConfigResource("broker", "1")
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(TIMEOUT)
    assert broker_configs["num.partitions"].value == "1"
    assert broker_configs["num.partitions"].is_read_only

    unknown = ConfigResource("topic", topic_name + "-missing")
    error = _error_of(admin.describe_configs([unknown])[unknown])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_incremental_alter_configs(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 1, **{"segment.ms": "100000"})

    def alter(*entries: ConfigEntry) -> None:
        resource = ConfigResource("topic", topic_name, incremental_configs=list(entries))
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)

    alter(ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    configs = _topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "12345"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["segment.ms"].value == "100000"

    alter(ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
          ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    configs = _topic_configs(admin, topic_name)
    assert configs["segment.ms"].value == "604800000"
    assert configs["segment.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "12345"

    bad = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert _error_of(admin.incremental_alter_configs([bad])[bad]).code() == \
        KafkaError.INVALID_CONFIG


def test_confluent_alter_configs_replaces_all(admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 1, **{"segment.ms": "100000"})
    resource = ConfigResource("topic", topic_name, set_config={"retention.ms": "999"})
    with pytest.warns(DeprecationWarning):
        future = admin.alter_configs([resource])[resource]
    future.result(TIMEOUT)
    configs = _topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "999"
    # AlterConfigs is a full replacement: what it does not name returns to the default.
    assert configs["segment.ms"].is_default


def test_dynamic_broker_configs_are_the_topics_defaults(fresh_broker: BrokerProcess,
                                                       topic_name: str) -> None:
    """As ``kafka-configs.sh --entity-type brokers``: the cluster's default (the empty
    name) and this broker's own (its id) change the defaults of every topic, existing
    ones too, in that order of precedence, and survive a restart; a config that cannot
    change while the broker runs is refused."""
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    _create(admin, topic_name, 1, **{"segment.ms": "60000"})

    def alter(name: str, **configs: str | None) -> int:
        return alter_broker_configs(fresh_broker.bootstrap, name,
                                    {k.replace("_", "."): v for k, v in configs.items()})

    def topic(name: str) -> tuple[str, int]:
        entry = _topic_configs(admin, topic_name)[name]
        return entry.value, entry.source

    assert alter("", log_retention_ms="3600000", log_cleanup_policy="compact") == 0
    assert topic("retention.ms") == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert topic("cleanup.policy")[0] == "compact"
    assert topic("segment.ms") == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # This broker's own, as confluent-kafka sends it (to the broker it names).
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert topic("retention.ms") == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    resource = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([resource])[resource].result(TIMEOUT)
    retention = described["log.retention.ms"]
    assert (retention.value, retention.source, retention.is_read_only) == (
        "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert described["num.partitions"].is_read_only
    assert alter("", num_partitions="3") == ErrorCode.invalid_request
    assert alter("", log_retention_ms="soon") == ErrorCode.invalid_config
    assert alter("7", log_retention_ms="1") == ErrorCode.invalid_request  # another broker

    fresh_broker.restart()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert topic("retention.ms") == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert alter("1", log_retention_ms=None) == 0
    assert topic("retention.ms") == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert alter("", log_retention_ms=None, log_cleanup_policy=None) == 0
    assert topic("retention.ms") == ("604800000", ConfigSource.DEFAULT_CONFIG.value)


def test_confluent_describe_cluster(admin: AdminClient, broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster().result(TIMEOUT)
    assert cluster.cluster_id
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", broker.port)]
    assert cluster.controller.id == cluster.nodes[0].id
    assert cluster.authorized_operations is None  # not asked for


def test_confluent_authorized_operations(admin: AdminClient, broker: BrokerProcess,
                                         topic_name: str) -> None:
    """Without ACLs, as in Kafka without an authorizer, everything a resource supports is
    allowed, and reported when a client asks."""
    _create(admin, topic_name)
    topic = admin.describe_topics(TopicCollection([topic_name]),
                                  include_authorized_operations=True)[topic_name].result(TIMEOUT)
    assert {op.name for op in topic.authorized_operations} == {
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS"}
    # A topic that does not exist, named, gets them too, as Kafka sets them on every named
    # entry: kafka-python 2.3 fails to decode the "omitted" value (bit 31 set).
    with WireConnection(broker.bootstrap) as connection:
        answer = connection.request(ApiKey.METADATA, 12, versioned_request(
            ApiKey.METADATA, 12, "MetadataRequest",
            topics=tuple(versioned_request(ApiKey.METADATA, 12, "MetadataRequestTopic",
                                           topic_id=None, name=name)
                         for name in (topic_name, f"{topic_name}-missing")),
            allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    known, missing = answer.topics
    assert (known.error_code, missing.error_code) == (0, ErrorCode.unknown_topic_or_partition)
    assert missing.topic_authorized_operations == known.topic_authorized_operations > 0
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE"}


def test_confluent_elect_leaders_alone(admin: AdminClient, topic_name: str) -> None:
    """Alone, the broker leads every partition: no election is ever needed."""
    _create(admin, topic_name, 2)
    asked = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1),
             TopicPartition(topic_name, 7)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(election, asked).result(TIMEOUT)
        assert {(tp.partition, error.code()) for tp, error in results.items()} == {
            (0, KafkaError.ELECTION_NOT_NEEDED), (1, KafkaError.ELECTION_NOT_NEEDED),
            (7, KafkaError.UNKNOWN_TOPIC_OR_PART)}
        assert admin.elect_leaders(election, None).result(TIMEOUT) == {}


def test_acls_as_kafka_without_an_authorizer(admin: AdminClient, kp_admin: KafkaAdminClient,
                                            topic_name: str) -> None:
    """No authorizer, as Kafka's default: every ACL call says security is disabled."""
    acl = AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:alice",
                     "*", AclOperation.READ, AclPermissionType.ALLOW)
    match_all = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    for future in (admin.create_acls([acl])[acl], admin.delete_acls([match_all])[match_all]):
        error = _error_of(future)
        assert error.code() == KafkaError.SECURITY_DISABLED
        assert "No Authorizer is configured" in error.str()
    # librdkafka reads DescribeAcls' error and drops it (2.16: an empty list, as from
    # Kafka); kafka-python reports it.
    assert admin.describe_acls(match_all).result(TIMEOUT) == []
    with pytest.raises(kafka.errors.SecurityDisabledError, match="No Authorizer"):
        kp_admin.describe_acls(KpACLFilter(
            principal=None, host="*", operation=KpACLOperation.ANY,
            permission_type=KpACLPermissionType.ANY,
            resource_pattern=KpResourcePatternFilter(KpResourceType.TOPIC, topic_name,
                                                     KpACLResourcePatternType.LITERAL)))


def test_confluent_list_offsets_and_delete_records(admin: AdminClient, broker: BrokerProcess,
                                                   topic_name: str) -> None:
    _create(admin, topic_name)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, ts in enumerate([5000, 9000, 7000]):
        producer.produce(topic_name, value=b"v%d" % i, partition=0, timestamp=BASE_TIMESTAMP + ts)
    assert producer.flush(TIMEOUT) == 0

    tp = TopicPartition(topic_name, 0)

    def offsets(spec: OffsetSpec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec})[tp].result(TIMEOUT)
        return info.offset, info.timestamp

    assert offsets(OffsetSpec.earliest())[0] == 0
    assert offsets(OffsetSpec.latest())[0] == 3
    assert offsets(OffsetSpec.max_timestamp()) == (1, BASE_TIMESTAMP + 9000)
    assert offsets(OffsetSpec.for_timestamp(BASE_TIMESTAMP + 6000)) == (1, BASE_TIMESTAMP + 9000)
    assert offsets(OffsetSpec.for_timestamp(BASE_TIMESTAMP + 9001))[0] == -1

    deleted = admin.delete_records([TopicPartition(topic_name, 0, 2)])
    assert deleted[tp].result(TIMEOUT).low_watermark == 2
    assert offsets(OffsetSpec.earliest())[0] == 2


# ------------------------------------------------------ kafka-python KafkaAdminClient
def test_kafka_python_create_list_describe_delete(kp_admin: KafkaAdminClient,
                                                  topic_name: str) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "5000"})])
    assert topic_name in kp_admin.list_topics()
    (description,) = kp_admin.describe_topics([topic_name])
    assert description["error_code"] == 0
    assert [p["partition_index"] for p in description["partitions"]] == [0, 1]
    assert all(p["isr_nodes"] == p["replica_nodes"] == [p["leader_id"]]
               for p in description["partitions"])

    kp_admin.create_partitions({topic_name: KpNewPartitions(3)})
    (description,) = kp_admin.describe_topics([topic_name])
    assert len(description["partitions"]) == 3

    result = kp_admin.delete_topics([topic_name])
    assert [t["error_code"] for t in result["topics"]] == [0]
    assert topic_name not in kp_admin.list_topics()


def test_kafka_python_log_dirs(kp_admin: KafkaAdminClient, broker: BrokerProcess,
                               topic_name: str) -> None:
    """DescribeLogDirs gives each partition's size on disk; AlterReplicaLogDirs moves a
    replica only to the one directory it is in."""
    kp_admin.create_topics([KpNewTopic(topic_name, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(30):
        producer.send(topic_name, b"x" * (100 + i), partition=i % 2)
    producer.flush()
    producer.close()
    on_disk = {index: sum(f.stat().st_size
                          for f in (broker.data_dir / f"{topic_name}-{index}").glob("*.log"))
               for index in (0, 1)}
    assert all(on_disk.values())
    (described,) = kp_admin.describe_log_dirs({topic_name: [1]})
    (log_dir,) = described["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, str(broker.data_dir.resolve()))
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    assert [(t["name"], [(p["partition_index"], p["partition_size"], p["offset_lag"])
                         for p in t["partitions"]]) for t in log_dir["topics"]] == [
        (topic_name, [(1, on_disk[1], 0)])]
    (everything,) = kp_admin.describe_log_dirs()
    sizes = {p["partition_index"]: p["partition_size"]
             for t in everything["log_dirs"][0]["topics"] if t["name"] == topic_name
             for p in t["partitions"]}
    assert sizes == on_disk

    here, missing = (topic_name, 0, 1), (topic_name, 5, 1)
    assert kp_admin.alter_replica_log_dirs({here: log_dir["log_dir"], missing: log_dir[
        "log_dir"]}) == {KpTopicPartitionReplica(*here): kafka.errors.NoError,
                         KpTopicPartitionReplica(*missing): kafka.errors.ReplicaNotAvailableError}
    assert kp_admin.alter_replica_log_dirs({here: "/nowhere"}) == {
        KpTopicPartitionReplica(*here): kafka.errors.LogDirNotFoundError}


@pytest.mark.parametrize(("partitions", "replication", "error"), [
    (1_000_000, 1, kafka.errors.InvalidPartitionsError),
    (1, 2, kafka.errors.InvalidReplicationFactorError),
])
def test_kafka_python_create_errors(kp_admin: KafkaAdminClient, topic_name: str, partitions: int,
                                    replication: int, error: type[Exception]) -> None:
    with pytest.raises(error):
        kp_admin.create_topics([KpNewTopic(topic_name, partitions, replication)])
    assert topic_name not in kp_admin.list_topics()


def test_kafka_python_create_existing_and_invalid(kp_admin: KafkaAdminClient,
                                                  topic_name: str) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    with pytest.raises(kafka.errors.TopicAlreadyExistsError):
        kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    with pytest.raises(kafka.errors.InvalidTopicError):
        kp_admin.create_topics([KpNewTopic("x" * 250, 1, 1)])
    kp_admin.create_topics([KpNewTopic(topic_name + "-v", 1, 1)], validate_only=True)
    assert topic_name + "-v" not in kp_admin.list_topics()


def test_kafka_python_configs(kp_admin: KafkaAdminClient, topic_name: str) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    resource = KpConfigResource(ConfigResourceType.TOPIC, topic_name)

    def describe() -> dict[str, str]:
        result = kp_admin.describe_configs([resource], config_filter="all")
        return {name: entry["value"] for name, entry in result["topic"][topic_name].items()}

    assert describe()["retention.ms"] == "604800000"
    kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name, configs={
        "retention.ms": ("SET", "4321"),
        "cleanup.policy": ("APPEND", "compact"),
    })])
    configs = describe()
    assert (configs["retention.ms"], configs["cleanup.policy"]) == ("4321", "delete,compact")

    kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name, configs={
        "retention.ms": ("DELETE", None)})])
    assert describe()["retention.ms"] == "604800000"

    kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name,
                                             configs={"segment.ms": "77777"})],
                           incremental=False)
    # A full AlterConfigs replacement: kafka-python carries the other modified keys over.
    configs = describe()
    assert (configs["segment.ms"], configs["cleanup.policy"]) == ("77777", "delete,compact")
    modified = kp_admin.describe_configs([resource])["topic"][topic_name]
    assert set(modified) == {"segment.ms", "cleanup.policy"}


def test_kafka_python_list_offsets_and_delete_records(kp_admin: KafkaAdminClient,
                                                      broker: BrokerProcess,
                                                      topic_name: str) -> None:
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i, ts in enumerate([3000, 8000, 1000, 5000]):
        producer.send(topic_name, value=b"v%d" % i, partition=0, timestamp_ms=BASE_TIMESTAMP + ts)
    producer.flush(TIMEOUT)
    producer.close()
    tp = KpTopicPartition(topic_name, 0)

    def lookup(spec: int) -> tuple[int, int]:
        found = kp_admin.list_partition_offsets({tp: spec})[tp]
        return found.offset, found.timestamp

    assert lookup(KpOffsetSpec.EARLIEST)[0] == 0
    assert lookup(KpOffsetSpec.LATEST)[0] == 4
    assert lookup(KpOffsetSpec.MAX_TIMESTAMP) == (1, BASE_TIMESTAMP + 8000)
    assert lookup(BASE_TIMESTAMP + 4000) == (1, BASE_TIMESTAMP + 8000)

    assert kp_admin.delete_records({tp: 3})[tp]["low_watermark"] == 3
    assert lookup(KpOffsetSpec.EARLIEST)[0] == 3
    with pytest.raises(kafka.errors.OffsetOutOfRangeError):
        kp_admin.delete_records({tp: 99})


def test_kafka_python_describe_cluster(kp_admin: KafkaAdminClient, broker: BrokerProcess) -> None:
    cluster = kp_admin.describe_cluster()
    assert cluster["cluster_id"]
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("127.0.0.1", broker.port)]
    assert cluster["controller_id"] == cluster["brokers"][0]["broker_id"]


# ------------------------------------------------------------------- kcat -L
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_metadata(admin: AdminClient, broker: BrokerProcess, topic_name: str) -> None:
    _create(admin, topic_name, 3)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-J", "-t", topic_name],
                         capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    metadata = json.loads(out)
    assert [(b["id"], b["name"]) for b in metadata["brokers"]] == [(1, broker.bootstrap)]
    (topic,) = metadata["topics"]
    assert topic["topic"] == topic_name
    assert [(p["partition"], p["leader"], [r["id"] for r in p["replicas"]])
            for p in topic["partitions"]] == [(0, 1, [1]), (1, 1, [1]), (2, 1, [1])]


# ------------------------------------------------- every advertised version, raw
def test_every_advertised_admin_version(broker: BrokerProcess, topic_name: str) -> None:
    """Admin clients differ in the versions they pick, so each advertised version of
    each admin API is exercised with real content, one topic per version."""
    seconds = datetime.timedelta(seconds=10)

    def request(key: ApiKey, version: int, entity: str, /, **fields: object):
        return connection.request(key, version, versioned_request(key, version, entity,
                                                                  **fields))

    def one(results) -> tuple[int, str | None]:
        (result,) = results
        return result.error_code, getattr(result, "error_message", None)

    with WireConnection(broker.bootstrap) as connection:
        told = None
        for version in advertised_versions(connection, ApiKey.API_VERSIONS):
            answer = request(ApiKey.API_VERSIONS, version, "ApiVersionsRequest",
                             client_software_name="gregor-tests", client_software_version="1")
            assert answer.error_code == 0
            ranges = {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys}
            assert told in (None, ranges), f"ApiVersions v{version} tells other ranges"
            told = ranges

        names = {}
        for version in advertised_versions(connection, ApiKey.CREATE_TOPICS):
            names[version] = name = f"{topic_name}-v{version}"
            config = versioned_request(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfig",
                                       name="retention.ms", value="3600000")
            topic = versioned_request(ApiKey.CREATE_TOPICS, version, "CreatableTopic",
                                      name=name, num_partitions=1, replication_factor=1,
                                      assignments=(), configs=(config,))
            answer = request(ApiKey.CREATE_TOPICS, version, "CreateTopicsRequest",
                             topics=(topic,), timeout=seconds, validate_only=False)
            assert one(answer.topics)[0] == 0, version

        for version in advertised_versions(connection, ApiKey.DESCRIBE_CONFIGS):
            resource = versioned_request(ApiKey.DESCRIBE_CONFIGS, version,
                                         "DescribeConfigsResource", resource_type=2,
                                         resource_name=names[2],
                                         configuration_keys=("retention.ms",))
            answer = request(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsRequest",
                             resources=(resource,), include_synonyms=True,
                             include_documentation=True)
            (result,) = answer.results
            assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "3600000")]

        for version in advertised_versions(connection, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            change = versioned_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version,
                                       "AlterableConfig", name="segment.ms",
                                       config_operation=0, value="7200000")
            resource = versioned_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version,
                                         "AlterConfigsResource", resource_type=2,
                                         resource_name=names[3], configs=(change,))
            answer = request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version,
                             "IncrementalAlterConfigsRequest", resources=(resource,),
                             validate_only=False)
            assert one(answer.responses)[0] == 0, version

        for version in advertised_versions(connection, ApiKey.ALTER_CONFIGS):
            change = versioned_request(ApiKey.ALTER_CONFIGS, version, "AlterableConfig",
                                       name="retention.bytes", value="1000000")
            resource = versioned_request(ApiKey.ALTER_CONFIGS, version, "AlterConfigsResource",
                                         resource_type=2, resource_name=names[4],
                                         configs=(change,))
            answer = request(ApiKey.ALTER_CONFIGS, version, "AlterConfigsRequest",
                             resources=(resource,), validate_only=False)
            assert one(answer.responses)[0] == 0, version

        for version in advertised_versions(connection, ApiKey.CREATE_PARTITIONS):
            topic = versioned_request(ApiKey.CREATE_PARTITIONS, version, "CreatePartitionsTopic",
                                      name=names[5], count=2 + version, assignments=None)
            answer = request(ApiKey.CREATE_PARTITIONS, version, "CreatePartitionsRequest",
                             topics=(topic,), timeout=seconds, validate_only=False)
            assert one(answer.results)[0] == 0, version

        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for _ in range(5):
            producer.produce(names[6], value=b"v", partition=0)
        assert producer.flush(TIMEOUT) == 0
        for version in advertised_versions(connection, ApiKey.DELETE_RECORDS):
            partition = versioned_request(ApiKey.DELETE_RECORDS, version, "DeleteRecordsPartition",
                                          partition_index=0, offset=version + 1)
            topic = versioned_request(ApiKey.DELETE_RECORDS, version, "DeleteRecordsTopic",
                                      name=names[6], partitions=(partition,))
            answer = request(ApiKey.DELETE_RECORDS, version, "DeleteRecordsRequest",
                             topics=(topic,), timeout=seconds)
            (result,) = answer.topics[0].partitions
            assert (result.error_code, result.low_watermark) == (0, version + 1)

        for version in advertised_versions(connection, ApiKey.INIT_PRODUCER_ID):
            answer = request(ApiKey.INIT_PRODUCER_ID, version, "InitProducerIdRequest",
                             transactional_id=None, transaction_timeout=seconds,
                             producer_id=-1, producer_epoch=-1)
            assert (answer.error_code, answer.producer_epoch) == (0, 0)
            assert answer.producer_id >= 0

        for version in advertised_versions(connection, ApiKey.DESCRIBE_CLUSTER):
            answer = request(ApiKey.DESCRIBE_CLUSTER, version, "DescribeClusterRequest",
                             include_cluster_authorized_operations=False, endpoint_type=1)
            assert answer.error_code == 0
            assert [(b.broker_id, b.port) for b in answer.brokers] == [(1, broker.port)]
        answer = request(ApiKey.DESCRIBE_CLUSTER, 1, "DescribeClusterRequest",
                         include_cluster_authorized_operations=False, endpoint_type=2)
        assert answer.error_code == ErrorCode.mismatched_endpoint_type

        log_dir = str(broker.data_dir.resolve())
        for version in advertised_versions(connection, ApiKey.DESCRIBE_LOG_DIRS):
            wanted = versioned_request(ApiKey.DESCRIBE_LOG_DIRS, version, "DescribableLogDirTopic",
                                       topic=names[2], partitions=(0,))
            answer = request(ApiKey.DESCRIBE_LOG_DIRS, version, "DescribeLogDirsRequest",
                             topics=(wanted,))
            (result,) = answer.results
            assert (result.error_code, result.log_dir) == (0, log_dir)
            assert [(t.name, [p.partition_index for p in t.partitions])
                    for t in result.topics] == [(names[2], [0])]
        for version in advertised_versions(connection, ApiKey.ALTER_REPLICA_LOG_DIRS):
            moved = versioned_request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDir",
                                      path=log_dir, topics=(versioned_request(
                                          ApiKey.ALTER_REPLICA_LOG_DIRS, version,
                                          "AlterReplicaLogDirTopic", name=names[2],
                                          partitions=(0,)),))
            answer = request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, "AlterReplicaLogDirsRequest",
                             dirs=(moved,))
            assert [(r.topic_name, [p.error_code for p in r.partitions])
                    for r in answer.results] == [(names[2], [0])]

        acl_filter = {"resource_type_filter": 1, "resource_name_filter": None,  # any
                      "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                      "operation": 1, "permission_type": 1}
        for version in advertised_versions(connection, ApiKey.DESCRIBE_ACLS):
            answer = request(ApiKey.DESCRIBE_ACLS, version, "DescribeAclsRequest", **acl_filter)
            assert answer.error_code == ErrorCode.security_disabled
        for version in advertised_versions(connection, ApiKey.CREATE_ACLS):
            creation = versioned_request(ApiKey.CREATE_ACLS, version, "AclCreation",
                                         resource_type=2, resource_name=topic_name,
                                         resource_pattern_type=3, principal="User:alice",
                                         host="*", operation=3, permission_type=3)
            answer = request(ApiKey.CREATE_ACLS, version, "CreateAclsRequest",
                             creations=(creation, creation))
            assert [r.error_code for r in answer.results] == [ErrorCode.security_disabled] * 2
        for version in advertised_versions(connection, ApiKey.DELETE_ACLS):
            answer = request(ApiKey.DELETE_ACLS, version, "DeleteAclsRequest", filters=(
                versioned_request(ApiKey.DELETE_ACLS, version, "DeleteAclsFilter", **acl_filter),))
            assert [r.error_code for r in answer.filter_results] == [ErrorCode.security_disabled]

        # Alone, a broker is every partition's only possible replica (the cluster's
        # reassignments: tests/cluster/test_reassignment.py).
        for version in advertised_versions(connection, ApiKey.ALTER_PARTITION_REASSIGNMENTS):
            partitions = tuple(versioned_request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, "ReassignablePartition",
                partition_index=index, replicas=replicas)
                for index, replicas in ((0, (1,)), (1, (1,)), (0, None)))
            answer = request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version,
                             "AlterPartitionReassignmentsRequest", timeout=seconds,
                             allow_replication_factor_change=True, topics=(versioned_request(
                                 ApiKey.ALTER_PARTITION_REASSIGNMENTS, version,
                                 "ReassignableTopic", name=names[2], partitions=partitions),))
            assert answer.error_code == 0
            (topic,) = answer.responses
            assert [p.error_code for p in topic.partitions] == [
                ErrorCode.no_reassignment_in_progress, ErrorCode.unknown_topic_or_partition]
        for version in advertised_versions(connection, ApiKey.LIST_PARTITION_REASSIGNMENTS):
            answer = request(ApiKey.LIST_PARTITION_REASSIGNMENTS, version,
                             "ListPartitionReassignmentsRequest", timeout=seconds, topics=None)
            assert (answer.error_code, answer.topics) == (0, ())

        ids = {t.name: t.topic_id for t in request(
            ApiKey.METADATA, 12, "MetadataRequest", topics=None,
            allow_auto_topic_creation=False, include_topic_authorized_operations=False).topics}
        for version in advertised_versions(connection, ApiKey.DELETE_TOPICS):
            name = names[version + 1]
            by_id = () if version < 6 else (versioned_request(
                ApiKey.DELETE_TOPICS, version, "DeleteTopicState", name=None,
                topic_id=ids[name]),)
            answer = request(ApiKey.DELETE_TOPICS, version, "DeleteTopicsRequest",
                             topic_names=(name,), topics=by_id, timeout=seconds)
            assert one(answer.responses)[0] == 0, version
    remaining = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
        timeout=TIMEOUT).topics
    assert not set(names.values()) & set(remaining)


def test_broker_logger_levels_change_at_runtime(kp_admin: KafkaAdminClient,
                                                broker: BrokerProcess) -> None:
    """BROKER_LOGGER configs, as kafka-configs.sh --entity-type broker-loggers: each
    logger's level, set while the broker runs (its log then shows what the level lets
    through), and deleted to inherit again; Kafka's errors for the rest."""
    logger = "gregor.broker.connection"
    resource = KpConfigResource(ConfigResourceType.BROKER_LOGGER, "1")

    def levels() -> dict[str, str]:
        described = kp_admin.describe_configs([resource])["broker_logger"]["1"]
        return {name: entry["value"] for name, entry in described.items()}

    def alter(**configs: tuple[str, str | None]) -> str:
        answer = kp_admin.alter_configs([KpConfigResource(ConfigResourceType.BROKER_LOGGER,
                                                          "1", configs=configs)])
        return answer["broker_logger"]["1"]

    before = levels()
    assert before["root"] == "INFO" and before[logger] == "INFO"

    def malformed_frame() -> None:
        # Metadata v12 whose topic array ends before its first entry.
        frame = struct.pack(">hhih", ApiKey.METADATA, 12, 7, -1) + b"\x00\x05"
        with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sock.recv(1)  # the broker closes the connection

    assert alter(**{logger: ("SET", "DEBUG")}) == "OK"
    assert levels()[logger] == "DEBUG"
    malformed_frame()
    assert "DEBUG gregor.broker.connection: malformed frame starts" in (
        broker.log_path.read_text())
    assert alter(**{logger: ("DELETE", None)}) == "OK"
    assert levels()[logger] == "INFO"  # the root's, inherited again
    written = broker.log_path.stat().st_size
    malformed_frame()
    assert "malformed frame starts" not in broker.log_path.read_text()[written:]

    assert alter(**{logger: ("SET", "LOUD")}).startswith("[Error 40]")  # INVALID_CONFIG
    assert alter(root=("DELETE", None)).startswith("[Error 42]")  # INVALID_REQUEST
    assert alter(**{logger: ("APPEND", "DEBUG")}).startswith("[Error 42]")
    with pytest.raises(kafka.errors.UnknownBrokerIdError):
        kp_admin.describe_configs([KpConfigResource(ConfigResourceType.BROKER_LOGGER, "2")])
