"""ACLs with Kafka's authorizer settings, checked by real clients authenticated with SASL:
the ACL APIs and ``gregor acls``, produce, consume, groups, idempotent and transactional
producers, Metadata's filtering, and the authorizer's rules themselves."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from clients import TIMEOUT
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import ResourceType as ConfigType
from kio.schema.describe_user_scram_credentials.v0 import request as describe_request
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from raw_frames import RawConnection

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import (
    AclBinding as Acl,
)
from gregor.security.acls import (
    Authorizer,
    Operation,
    PatternType,
    Permission,
)
from gregor.security.acls import (
    ResourceType as Kind,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("acls") / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides={"sasl.enabled.mechanisms": "PLAIN",
                   "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                   "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "super.users": "User:admin", "group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


def _config(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


def _gregor(broker: BrokerProcess, *args: str, user: str = "admin"
            ) -> subprocess.CompletedProcess[str]:
    flags = [f"-X{name}={value}" for name, value in _config(broker, user).items()
             if name != "bootstrap.servers"]
    return subprocess.run([sys.executable, "-m", "gregor.cli.main", *args,
                           "-b", broker.bootstrap, *flags],
                          capture_output=True, text=True, timeout=TIMEOUT)


def _grant(broker: BrokerProcess, *args: str) -> None:
    result = _gregor(broker, "acls", "add", *args)
    assert result.returncode == 0, result.stderr


def _produce(broker: BrokerProcess, user: str, topic: str, **extra: str) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**_config(broker, user), "message.timeout.ms": 5000, **extra})
    producer.produce(topic, value=b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(TIMEOUT)
    return outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT)


def _consume(broker: BrokerProcess, user: str, topic: str, group: str
             ) -> tuple[list[bytes], list[int]]:
    consumer = Consumer({**_config(broker, user), "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    errors: list[int] = []
    deadline = time.monotonic() + 10
    try:
        while not values and not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(message.error().code())
            else:
                values.append(message.value())
    finally:
        consumer.close()
    return values, errors


def test_acl_apis_need_the_cluster_and_gregor_acls_manages_them(
        guarded: BrokerProcess, topic_name: str) -> None:
    refused = _gregor(guarded, "acls", "add", "--topic", topic_name, "--allow-principal",
                      "User:alice", "--operation", "Read", user="alice")
    assert refused.returncode != 0 and "Cluster authorization failed" in refused.stderr
    _grant(guarded, "--topic", topic_name, "--resource-pattern-type", "prefixed",
           "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read")
    listed = _gregor(guarded, "acls", "list", "--topic", topic_name).stdout
    assert f"Topic:PREFIXED:{topic_name}\tUser:alice\t*\tWRITE\tALLOW" in listed
    assert f"Topic:PREFIXED:{topic_name}\tUser:alice\t*\tREAD\tALLOW" in listed
    removed = _gregor(guarded, "acls", "remove", "--topic", topic_name,
                      "--resource-pattern-type", "prefixed", "--allow-principal", "User:alice",
                      "--operation", "Read")
    assert removed.returncode == 0 and "Removed 1 ACL(s)." in removed.stdout
    assert "READ" not in _gregor(guarded, "acls", "list", "--topic", topic_name).stdout


def test_produce_consume_and_metadata_follow_the_acls(guarded: BrokerProcess,
                                                      topic_name: str) -> None:
    admin = AdminClient(_config(guarded, "admin"))
    for future in admin.create_acls([
            AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL,
                       "User:alice", "*", operation, AclPermissionType.ALLOW)
            for operation in (AclOperation.WRITE, AclOperation.READ, AclOperation.CREATE)
    ] + [AclBinding(ResourceType.GROUP, f"g-{topic_name}", ResourcePatternType.LITERAL,
                    "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result()
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:bob", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result()
    assert _produce(guarded, "alice", topic_name) is None  # auto-created with CREATE
    denied = _produce(guarded, "bob", topic_name)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume(guarded, "alice", topic_name, f"g-{topic_name}") == ([b"v"], [])
    # bob may read the topic (so describe it: Produce itself refuses him) but not use
    # the group.
    values, errors = _consume(guarded, "bob", topic_name, f"g-{topic_name}")
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors
    # Metadata leaves out what a principal may not describe; READ implies DESCRIBE.
    other = f"{topic_name}-hidden"
    _produce(guarded, "admin", other)
    seen_by_bob = AdminClient(_config(guarded, "bob")).list_topics(timeout=TIMEOUT).topics
    assert topic_name in seen_by_bob and other not in seen_by_bob
    named = AdminClient(_config(guarded, "bob")).list_topics(other, timeout=TIMEOUT)
    assert named.topics[other].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_wins_and_prefixes_cover_their_topics(guarded: BrokerProcess,
                                                   topic_name: str) -> None:
    _grant(guarded, "--topic", topic_name, "--resource-pattern-type", "prefixed",
           "--allow-principal", "User:alice", "--operation", "All")
    _grant(guarded, "--topic", f"{topic_name}-no", "--deny-principal", "User:alice",
           "--operation", "Write")
    assert _produce(guarded, "alice", f"{topic_name}-yes") is None
    denied = _produce(guarded, "alice", f"{topic_name}-no")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_and_transactional_producers(guarded: BrokerProcess,
                                                topic_name: str) -> None:
    """KIP-679: topic WRITE is enough for an idempotent producer; a transactional one
    needs WRITE on its transactional id too."""
    _grant(guarded, "--topic", topic_name, "--allow-principal", "User:alice",
           "--allow-principal", "User:bob", "--operation", "Write", "--operation", "Create")
    assert _produce(guarded, "alice", topic_name, **{"enable.idempotence": "true"}) is None
    _grant(guarded, "--transactional-id", f"tx-{topic_name}", "--allow-principal",
           "User:alice", "--operation", "Write")
    for user, allowed in (("alice", True), ("bob", False)):
        producer = Producer({**_config(guarded, user), "transactional.id": f"tx-{topic_name}"})
        if not allowed:
            with pytest.raises(KafkaException) as refused:
                producer.init_transactions(TIMEOUT)
            assert refused.value.args[0].code() == (
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            continue
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce(topic_name, value=b"in a transaction")
        producer.commit_transaction(TIMEOUT)


def test_fetch_needs_read(guarded: BrokerProcess, topic_name: str) -> None:
    """WRITE lets alice describe the topic and produce, not fetch from it."""
    _grant(guarded, "--topic", topic_name, "--allow-principal", "User:alice",
           "--operation", "Write", "--operation", "Create")
    _grant(guarded, "--group", f"g-{topic_name}", "--allow-principal", "User:alice",
           "--operation", "Read")
    assert _produce(guarded, "alice", topic_name) is None
    consumer = Consumer({**_config(guarded, "alice"), "group.id": f"g-{topic_name}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    errors: list[int] = []
    deadline = time.monotonic() + 10
    try:
        while not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is not None, "fetched without READ"
                errors.append(message.error().code())
    finally:
        consumer.close()
    assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_admin_apis_without_acls(guarded: BrokerProcess, topic_name: str) -> None:
    """bob has no ACL: the admin APIs answer Kafka's authorization errors; alice's group
    is left out of bob's listing."""
    _produce(guarded, "admin", topic_name)
    bob = AdminClient(_config(guarded, "bob"))

    def error_of(future: Future[object]) -> int:
        with pytest.raises(KafkaException) as refused:
            future.result(TIMEOUT)
        return refused.value.args[0].code()

    assert error_of(bob.create_topics([NewTopic(f"{topic_name}-new", 1, 1)])[
        f"{topic_name}-new"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert error_of(bob.delete_topics([topic_name])[topic_name]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED)
    (config_future,) = bob.describe_configs([ConfigResource(ConfigType.BROKER, "1")]).values()
    assert error_of(config_future) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    (topic_config,) = bob.describe_configs([ConfigResource(ConfigType.TOPIC,
                                                           topic_name)]).values()
    assert error_of(topic_config) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Kafka's answer (the error at the top and per user) aborts librdkafka 2.16's
    # describe_user_scram_credentials: asked on the wire.
    with RawConnection(guarded.bootstrap) as connection:
        connection.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        connection.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
            auth_bytes=b"\0bob\0bob-secret"))
        described = connection.request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
            describe_request.DescribeUserScramCredentialsRequest(
                users=(describe_request.UserName(name="alice"),)))
    assert described.error_code == ErrorCode.cluster_authorization_failed
    assert [r.error_code for r in described.results] == [ErrorCode.cluster_authorization_failed]
    admin = AdminClient(_config(guarded, "admin"))
    assert _consume(guarded, "admin", topic_name, f"g-{topic_name}")[0] == [b"v"]
    listed = admin.list_consumer_groups().result(TIMEOUT).valid
    assert f"g-{topic_name}" in {g.group_id for g in listed}
    assert bob.list_consumer_groups().result(TIMEOUT).valid == []


# ----------------------------------------------------------- the rules, on their own
def _acl(principal: str, operation: Operation, permission: Permission = Permission.ALLOW,
         name: str = "orders", pattern: PatternType = PatternType.LITERAL,
         host: str = "*") -> Acl:
    return Acl(Kind.TOPIC, name, pattern, principal, host, operation, permission)


def test_authorizer_rules() -> None:
    acls: set[Acl] = set()
    authorizer = Authorizer(lambda: acls, ["User:root"], allow_if_no_acl=False)

    def may(principal: str, operation: Operation, name: str = "orders",
            host: str = "10.0.0.1") -> bool:
        return authorizer.authorize(principal, host, operation, Kind.TOPIC, name)

    assert not may("User:alice", Operation.READ)  # no ACL, and no one allowed by default
    assert may("User:root", Operation.DELETE)  # super users pass everything
    acls.add(_acl("User:alice", Operation.READ))
    assert may("User:alice", Operation.READ) and may("User:alice", Operation.DESCRIBE)
    assert not may("User:alice", Operation.WRITE) and not may("User:bob", Operation.READ)
    acls.add(_acl("User:*", Operation.WRITE, name="ord", pattern=PatternType.PREFIXED))
    assert may("User:bob", Operation.WRITE) and may("User:bob", Operation.WRITE, "ordinary")
    acls.add(_acl("User:bob", Operation.ALL, Permission.DENY, host="10.0.0.1"))
    assert not may("User:bob", Operation.WRITE) and may("User:bob", Operation.WRITE,
                                                         host="10.0.0.2")
    acls.add(_acl("User:carol", Operation.ALTER_CONFIGS, name="*"))
    assert may("User:carol", Operation.DESCRIBE_CONFIGS, "anything")
    assert not may("User:carol", Operation.READ, "anything")
    open_authorizer = Authorizer(lambda: acls, [], allow_if_no_acl=True)
    assert open_authorizer.authorize("User:x", "h", Operation.READ, Kind.GROUP, "g")
    assert not open_authorizer.authorize("User:x", "h", Operation.READ, Kind.TOPIC, "orders")
