"""The Spark connector against a secured broker: both read paths (the JVM source and the
Python data source) and the sink (at-least-once and exactly-once) over SASL_SSL with
SCRAM and PLAIN and over SSL, with librdkafka's setting names and with the Java client's
that Spark's Kafka source takes (``kafka.sasl.jaas.config``, a PKCS12
``kafka.ssl.truststore.location``); a wrong password fails the query at once."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import confluent_consume
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from gregor.broker.process import BrokerProcess

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_carol="carol-secret";')
STORE_PASSWORD = "gregor-secret"
"""scripts/make-certs.sh's password for its PKCS12 stores."""
TIMEOUT = 60


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    """SASL_SSL and SSL listeners for clients, PLAINTEXT on loopback for the test's admin;
    SCRAM user alice, PLAIN user carol."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("secured-spark") / "data",
        listeners="SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={"advertised.listeners": "SASL_SSL://localhost:0,SSL://localhost:0",
                   "ssl.keystore.type": "PEM",
                   "ssl.keystore.location": str(certs / "broker.pem"),
                   "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                   "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
                   "group.initial.rebalance.delay.ms": "0"})
    process.start()
    subprocess.run([sys.executable, "-m", "gregor.cli.main", "users", "create", "alice", "-b",
                    process.bootstrap_for("PLAINTEXT")], input="alice-secret\n", text=True,
                   check=True, capture_output=True, timeout=TIMEOUT)
    yield process
    process.stop()


def _librdkafka_scram(broker: BrokerProcess, certs: Path, password: str = "alice-secret",
                      ) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap_for("SASL_SSL", "localhost"),
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.ca.location": str(certs / "ca.pem"),
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "alice",
            "kafka.sasl.password": password}


def _java_trust_store(certs: Path) -> Path:
    """The CA in a PKCS12 trust store made by Java's keytool, as Java users make theirs
    (OpenSSL 3.0's ``pkcs12 -nokeys`` leaves out the attribute that makes Java trust a
    certificate, so Java finds no trust anchor in make-certs.sh's truststore.p12)."""
    store = certs / "java-truststore.p12"
    if not store.exists():
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file",
                        str(certs / "ca.pem"), "-keystore", str(store), "-storetype", "PKCS12",
                        "-storepass", STORE_PASSWORD], check=True, capture_output=True,
                       timeout=TIMEOUT)
    return store


def _java_plain(broker: BrokerProcess, certs: Path) -> dict[str, str]:
    """As a job written for Spark's Kafka source sets them."""
    return {"kafka.bootstrap.servers": broker.bootstrap_for("SASL_SSL", "localhost"),
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                      'required username="carol" password="carol-secret";',
            "kafka.ssl.truststore.location": str(_java_trust_store(certs)),
            "kafka.ssl.truststore.type": "PKCS12",
            "kafka.ssl.truststore.password": STORE_PASSWORD}


def _java_scram(broker: BrokerProcess, certs: Path) -> dict[str, str]:
    return {**_java_plain(broker, certs), "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                      'required username="alice" password="alice-secret";'}


def _ssl(broker: BrokerProcess, certs: Path) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap_for("SSL", "localhost"),
            "kafka.security.protocol": "SSL", "kafka.ssl.ca.location": str(certs / "ca.pem")}


def _topic_with(broker: BrokerProcess, values: list[bytes], partitions: int = 2) -> str:
    topic = f"secured-{uuid.uuid4().hex[:10]}"
    plain = broker.bootstrap_for("PLAINTEXT")
    admin = AdminClient({"bootstrap.servers": plain})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": plain})
    for index, value in enumerate(values):
        producer.produce(topic, value=value, partition=index % partitions)
    assert producer.flush(TIMEOUT) == 0
    return topic


def _committed_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_for("PLAINTEXT"),
                         "group.id": f"check-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    try:
        return [message.value() for message in confluent_consume(consumer, count, TIMEOUT)]
    finally:
        consumer.close()


@pytest.mark.parametrize("settings", [_librdkafka_scram, _java_plain, _java_scram, _ssl],
                         ids=["librdkafka-scram-512", "java-plain-pkcs12", "java-scram-256",
                              "ssl"])
def test_the_source_reads_over_tls_and_sasl(spark: SparkSession, secured: BrokerProcess,
                                            certs: Path, source_format: str,
                                            settings: object) -> None:
    """Before, both paths refused any security.protocol but PLAINTEXT when the query
    started; the Java client's names also fail in librdkafka on the driver unrenamed."""
    values = [f"secret-{i}".encode() for i in range(50)]
    topic = _topic_with(secured, values)
    options = settings(secured, certs)  # type: ignore[operator]
    rows = (spark.read.format(source_format).options(**options).option("subscribe", topic)
            .load().select("value").collect())
    assert sorted(bytes(r.value) for r in rows) == sorted(values)


def test_a_stream_reads_over_sasl_ssl(spark: SparkSession, secured: BrokerProcess,
                                      certs: Path, source_format: str,
                                      tmp_path: Path) -> None:
    """A micro-batch query plans (ListOffsets) and reads over SASL_SSL too."""
    values = [f"streamed-{i}".encode() for i in range(20)]
    topic = _topic_with(secured, values)
    query = (spark.readStream.format(source_format).options(**_java_scram(secured, certs))
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .select("value").writeStream.format("memory").queryName(f"q_{topic[-10:]}")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    assert query.awaitTermination(4 * TIMEOUT), "the query did not end"
    assert query.exception() is None
    rows = spark.sql(f"SELECT value FROM q_{topic[-10:]}").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(values)


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_the_sink_writes_over_sasl_ssl(spark: SparkSession, secured: BrokerProcess,
                                       certs: Path, guarantee: str) -> None:
    """The exactly-once sink's own protocol connections (transactions, its commit log)
    and librdkafka's producer, all over SASL_SSL with the Java client's names."""
    topic = _topic_with(secured, [])
    values = [f"written-{i}" for i in range(30)]
    (spark.createDataFrame([(v,) for v in values], "value string").write.format("gregor")
     .options(**_java_scram(secured, certs)).option("topic", topic)
     .option("deliveryGuarantee", guarantee).mode("append").save())
    assert sorted(_committed_values(secured, topic, len(values))) == sorted(
        v.encode() for v in values)


def test_a_wrong_password_fails_the_query_at_once(spark: SparkSession, secured: BrokerProcess,
                                                  certs: Path, source_format: str) -> None:
    """Not retried until kafkaConsumer.pollTimeoutMs as an unreachable leader is, nor
    until librdkafka's request timeout on the Python source's driver."""
    topic = _topic_with(secured, [b"x"])
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)authentication failed"):
        (spark.read.format(source_format).options(**_librdkafka_scram(secured, certs, "wrong"))
         .option("subscribe", topic).option("kafkaConsumer.pollTimeoutMs", "300000")
         .load().collect())
    assert time.monotonic() - started < 120
