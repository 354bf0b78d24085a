"""TLS listeners as Kafka configures them, with real clients and real certificates
(scripts/make-certs.sh): several listeners on one broker, each advertised to its own
clients; PEM, encrypted PEM and PKCS12 key stores; mutual TLS; versions and cipher
suites; a broker that cannot load its keys refuses to start."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from clients import TIMEOUT, confluent_consume, confluent_consumer
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from gregor.broker.process import BrokerProcess
from gregor.config import BrokerConfig, ConfigError
from gregor.security.session import certificate_subject
from gregor.security.tls import openssl_cipher_name, server_context

PASSWORD = "gregor-secret"  # scripts/make-certs.sh's


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    """PLAINTEXT, SSL (PEM key store) and MTLS (an SSL listener of another name, PKCS12
    key and trust stores, client certificates required: per-listener settings)."""
    data = tmp_path_factory.mktemp("tls") / "data"
    process = BrokerProcess(
        data, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        overrides={
            "advertised.listeners": "SSL://localhost:0,MTLS://localhost:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs / "broker.pem"),
            "listener.name.mtls.ssl.keystore.type": "PKCS12",
            "listener.name.mtls.ssl.keystore.location": str(certs / "broker.p12"),
            "listener.name.mtls.ssl.keystore.password": PASSWORD,
            "listener.name.mtls.ssl.truststore.type": "PKCS12",
            "listener.name.mtls.ssl.truststore.location": str(certs / "truststore.p12"),
            "listener.name.mtls.ssl.truststore.password": PASSWORD,
            "listener.name.mtls.ssl.client.auth": "required",
            "group.initial.rebalance.delay.ms": "0",
        })
    process.start()
    yield process
    process.stop()


def _ssl_config(broker: BrokerProcess, certs: Path, listener: str = "SSL") -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap_for(listener, "localhost"),
            "security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}


def test_confluent_over_tls_with_large_records(secured: BrokerProcess, certs: Path,
                                               topic_name: str) -> None:
    """Fetch answers over TLS cannot use sendfile: file regions above its threshold
    (64 KiB) go through the TLS transport, and must arrive intact."""
    config = _ssl_config(secured, certs)
    producer = Producer({**config, "linger.ms": 50})
    values = [bytes([i]) * (i * 40_000 + 1) for i in range(1, 8)]  # up to 280 kB
    for value in values:
        producer.produce(topic_name, value=value)
    assert producer.flush(TIMEOUT) == 0
    consumer = confluent_consumer(config["bootstrap.servers"], **{
        k: v for k, v in config.items() if k != "bootstrap.servers"})
    consumer.subscribe([topic_name])
    try:
        assert [m.value() for m in confluent_consume(consumer, len(values))] == values
    finally:
        consumer.close()


def test_each_listener_advertises_its_own_address(secured: BrokerProcess, certs: Path) -> None:
    """A client is told the address of the listener it came in on (Kafka's rule), so a
    TLS client never gets sent to the PLAINTEXT port, nor the other way round."""
    over_tls = AdminClient(_ssl_config(secured, certs)).list_topics(timeout=TIMEOUT)
    plain = AdminClient({"bootstrap.servers": secured.bootstrap_for("PLAINTEXT")}).list_topics(
        timeout=TIMEOUT)
    assert [(b.host, b.port) for b in over_tls.brokers.values()] == [
        ("localhost", secured.listener_ports["SSL"])]
    assert [(b.host, b.port) for b in plain.brokers.values()] == [
        ("127.0.0.1", secured.listener_ports["PLAINTEXT"])]


def test_plaintext_client_on_tls_listener_is_not_served(secured: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap_for("SSL", "localhost"),
                         "socket.timeout.ms": 2000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


def test_mutual_tls(secured: BrokerProcess, certs: Path, topic_name: str) -> None:
    """ssl.client.auth=required: a certificate from the trusted CA is served; none, or
    one from another CA, fails the handshake."""
    config = {**_ssl_config(secured, certs, "MTLS"),
              "ssl.certificate.location": str(certs / "client.pem"),
              "ssl.key.location": str(certs / "client.key")}
    producer = Producer(config)
    producer.produce(topic_name, value=b"signed")
    assert producer.flush(TIMEOUT) == 0

    host, port = "localhost", secured.listener_ports["MTLS"]
    for cert in (None, "other-client"):
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        if cert is not None:
            context.load_cert_chain(certs / f"{cert}.pem", certs / f"{cert}.key")
        with pytest.raises((ssl.SSLError, ConnectionError)), socket.create_connection(
                (host, port), timeout=TIMEOUT) as raw, context.wrap_socket(
                raw, server_hostname=host) as tls:
            # TLS 1.3: the server's verdict on the client certificate arrives after the
            # client's side of the handshake completed, with the first read.
            tls.sendall(b"\0\0\0\0")
            if not tls.recv(1):
                raise ConnectionError("closed")


def test_kafka_python_and_aiokafka_over_tls(secured: BrokerProcess, certs: Path,
                                            topic_name: str) -> None:
    bootstrap = secured.bootstrap_for("SSL", "localhost")
    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_cafile=str(certs / "ca.pem"))
    producer.send(topic_name, b"from kafka-python").get(TIMEOUT)
    producer.close()

    async def aiokafka_round_trip() -> list[bytes]:
        context = create_ssl_context(cafile=str(certs / "ca.pem"))
        aio_producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                                        ssl_context=context)
        await aio_producer.start()
        try:
            await aio_producer.send_and_wait(topic_name, b"from aiokafka")
        finally:
            await aio_producer.stop()
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=bootstrap,
                                    security_protocol="SSL", ssl_context=context,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=int(TIMEOUT * 1000), max_records=2)
            return [m.value for records in batches.values() for m in records]
        finally:
            await consumer.stop()

    values = asyncio.run(aiokafka_round_trip())
    consumer = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_cafile=str(certs / "ca.pem"), auto_offset_reset="earliest",
                             consumer_timeout_ms=int(TIMEOUT * 1000))
    try:
        read = [next(consumer).value for _ in range(2)]
    finally:
        consumer.close()
    assert read == values == [b"from kafka-python", b"from aiokafka"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_tls(secured: BrokerProcess, certs: Path, topic_name: str) -> None:
    """Debian's kcat (librdkafka 2.0.2), which checks the host name too."""
    base = ["kcat", "-b", secured.bootstrap_for("SSL", "localhost"), "-q",
            "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
    subprocess.run([*base, "-P", "-t", topic_name], input=b"one\ntwo\n", check=True,
                   timeout=TIMEOUT)
    out = subprocess.run([*base, "-C", "-t", topic_name, "-e", "-o", "beginning"],
                         capture_output=True, check=True, timeout=TIMEOUT).stdout
    assert out.split() == [b"one", b"two"]


# ------------------------------------------------------------- the TLS context alone
def _handshake(context: ssl.SSLContext, client: ssl.SSLContext) -> tuple[dict, str, str]:
    """One real handshake over a socket pair: the server's view of the client's
    certificate, the TLS version and the cipher negotiated."""
    server_end, client_end = socket.socketpair()
    result: dict = {}

    def serve() -> None:
        try:
            with context.wrap_socket(server_end, server_side=True) as tls:
                result.update(cert=tls.getpeercert() or {}, version=tls.version(),
                              cipher=tls.cipher()[0])
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            result["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(client_end, server_hostname="localhost") as tls:
            tls.sendall(b"x")
    finally:
        thread.join(TIMEOUT)
    if "error" in result:
        raise result["error"]
    return result["cert"], result["version"], result["cipher"]


def _client(certs: Path, *, cert: str | None = "client") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert is not None:
        context.load_cert_chain(certs / f"{cert}.pem", certs / f"{cert}.key")
    return context


def _config(certs: Path, **settings: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker.pem"), **settings})


def test_principal_is_the_certificate_subject_as_java_prints_it(certs: Path) -> None:
    """Kafka's principal of a TLS client: ``User:`` and the subject in RFC 2253 order
    (most specific first), which super.users and ACLs name."""
    context = server_context(_config(certs, **{
        "ssl.client.auth": "requested", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem")}), "SSL")
    cert, _, _ = _handshake(context, _client(certs))
    assert certificate_subject(cert["subject"]) == "CN=client,OU=test,O=gregor,C=US"
    # requested, not required: a client without a certificate is served anonymously.
    assert _handshake(context, _client(certs, cert=None))[0] == {}


def test_client_auth_on_sasl_ssl_listeners_only_per_listener(certs: Path) -> None:
    """As in Kafka, a SASL_SSL listener ignores the broker-wide ssl.client.auth (its
    clients authenticate with SASL) but not its own listener.name.<l>.ssl.client.auth."""
    settings = {"ssl.client.auth": "required", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs / "ca.pem")}
    assert server_context(_config(certs, **settings), "SSL").verify_mode == ssl.CERT_REQUIRED
    assert server_context(_config(certs, **settings), "SASL_SSL",
                          sasl=True).verify_mode == ssl.CERT_NONE
    own = {**settings, "listener.name.sasl_ssl.ssl.client.auth": "requested"}
    assert server_context(_config(certs, **own), "SASL_SSL",
                          sasl=True).verify_mode == ssl.CERT_OPTIONAL


def test_encrypted_pem_key_needs_its_password(certs: Path) -> None:
    settings = {"ssl.keystore.location": str(certs / "broker-encrypted.pem")}
    context = server_context(_config(certs, **settings, **{"ssl.key.password": PASSWORD}),
                             "SSL")
    assert _handshake(context, _client(certs, cert=None))[1].startswith("TLSv1.")
    with pytest.raises(ConfigError, match="key store"):
        server_context(_config(certs, **settings, **{"ssl.key.password": "wrong"}), "SSL")


def test_enabled_protocols_and_cipher_suites(certs: Path) -> None:
    only13 = server_context(_config(certs, **{"ssl.enabled.protocols": "TLSv1.3"}), "SSL")
    assert _handshake(only13, _client(certs, cert=None))[1] == "TLSv1.3"
    old_client = _client(certs, cert=None)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        _handshake(only13, old_client)

    # Kafka names suites by their IANA (Java) names; naming only TLS 1.2 ones means TLS 1.2.
    suite = server_context(_config(certs, **{
        "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}), "SSL")
    assert _handshake(suite, _client(certs, cert=None))[1:] == (
        "TLSv1.2", "ECDHE-RSA-AES256-GCM-SHA384")
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == (
        "ECDHE-ECDSA-CHACHA20-POLY1305")
    assert openssl_cipher_name("TLS_RSA_WITH_AES_128_CBC_SHA") == "AES128-SHA"


def test_broker_without_usable_keys_refuses_to_start(tmp_path: Path, certs: Path) -> None:
    """A key store Java's format only (JKS, Kafka's default type) or missing: the broker
    exits with the reason before serving anything."""
    for settings, reason in (
            ({"ssl.keystore.location": str(certs / "broker.pem")}, "JKS"),
            ({"ssl.keystore.type": "PEM"}, "no ssl.keystore.location")):
        process = BrokerProcess(tmp_path / "data", listeners="SSL://127.0.0.1:0",
                                overrides=settings)
        with pytest.raises(RuntimeError, match=reason):
            process.start()
