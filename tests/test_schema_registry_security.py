"""A schema registry for a cluster that requires TLS and SASL: its Kafka clients (the
``_schemas`` reader and writer, and the primary's election, which speaks the group
protocol itself) all connect with the security settings it is given."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    """Clients only on SASL_SSL; PLAINTEXT on loopback for the admin that adds a user."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("registry-sasl") / "data",
        listeners="SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                   "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                   "advertised.listeners": "SASL_SSL://localhost:0",
                   "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem"),
                   "group.initial.rebalance.delay.ms": "0"})
    process.start()
    subprocess.run([sys.executable, "-m", "gregor.cli.main", "users", "create", "registry",
                    "-b", process.bootstrap_for("PLAINTEXT")], input="registry-secret\n",
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
