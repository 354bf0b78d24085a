"""A schema registry for a cluster that requires TLS and SASL: its Kafka clients (the
``_schemas`` reader and writer, and the primary's election, which speaks the group
protocol itself) all connect with the security settings it is given; ACLs that let its
user at its topic only after a first refusal do not stop it."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from gregor.broker.process import BrokerProcess
from gregor.schemas import errors
from gregor.schemas.process import RegistryProcess
from gregor.schemas.schema_topic import SchemaTopic
from gregor.schemas.state import RegistryState

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    """Clients only on SASL_SSL; PLAINTEXT on loopback for the admin that adds users and
    ACLs. ACLs are enforced: every principal but ``limited`` is a super user."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("registry-sasl") / "data",
        listeners="SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                   "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                   "advertised.listeners": "SASL_SSL://localhost:0",
                   "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem"),
                   "group.initial.rebalance.delay.ms": "0",
                   "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "super.users": "User:admin;User:registry;User:ANONYMOUS"})
    process.start()
    for user in ("registry", "limited"):
        subprocess.run([sys.executable, "-m", "gregor.cli.main", "users", "create", user,
                        "-b", process.bootstrap_for("PLAINTEXT")], input=f"{user}-secret\n",
                       text=True, check=True, capture_output=True, timeout=60)
    yield process
    process.stop()


def test_a_registry_elects_and_writes_over_sasl_ssl(secured: BrokerProcess,
                                                     certs: Path) -> None:
    """Without the election's security it would knock in PLAINTEXT on a SASL_SSL
    listener: no primary, and every write refused after the wait for one."""
    registry = RegistryProcess(secured.bootstrap_for("SASL_SSL", "localhost"), options=(
        "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
        "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=registry",
        "-X", "sasl.password=registry-secret")).start()
    try:
        client = SchemaRegistryClient({"url": registry.url})
        subject = f"secure-{uuid.uuid4().hex[:8]}-value"
        schema = Schema('{"type": "record", "name": "S", "fields": '
                        '[{"name": "a", "type": "long"}]}', "AVRO")
        schema_id = client.register_schema(subject, schema)
        assert client.get_schema(schema_id).schema_str == schema.schema_str.replace(" ", "")
        assert any("primary" in line and "this instance" in line for line in registry.output)
    finally:
        registry.stop()


def test_the_schemas_reader_asks_again_after_a_refusal_its_client_cached(
        secured: BrokerProcess, certs: Path, topic_name: str) -> None:
    """A broker that refused to describe the topic once (one that had not yet read the
    ACLs allowing it) leaves the refusal in librdkafka's metadata cache, from which
    every later list_offsets fails at once with _NOENT: the reader must ask for the
    topic again, or it fails after its whole timeout though the ACL is there."""
    admin = AdminClient({"bootstrap.servers": secured.bootstrap_for("PLAINTEXT")})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)

    def allow(topic: str, operation: AclOperation) -> None:
        acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                         "User:limited", "*", operation, AclPermissionType.ALLOW)
        admin.create_acls([acl])[acl].result(30)

    # WRITE on some other topic: the reader's idempotent producer may have its id.
    allow(f"{topic_name}-elsewhere", AclOperation.WRITE)
    reader = SchemaTopic({
        "bootstrap.servers": secured.bootstrap_for("SASL_SSL", "localhost"),
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "limited",
        "sasl.password": "limited-secret"}, RegistryState(), threading.Condition(),
        topic=topic_name, timeout=3.0)
    try:
        with pytest.raises(errors.RegistryError, match="_NOENT"):
            reader.catch_up()  # no ACL yet: refused, and the refusal cached
        allow(topic_name, AclOperation.READ)
        reader.catch_up()
    finally:
        reader.close()
