"""SASL (PLAIN, SCRAM-SHA-256/512) with real clients over real TLS, SCRAM users managed
with KIP-554's admin API and ``gregor users``, and a broker that refuses wrong
passwords, early requests and malformed frames, and never falls over."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError as AIOKafkaConnectionError
from aiokafka.helpers import create_ssl_context
from clients import TIMEOUT, api_versions
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.net.sasl.scram import ScramClient
from kio.schema.alter_user_scram_credentials.v0 import request as alter_request
from kio.schema.describe_user_scram_credentials.v0 import request as describe_request
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from raw_frames import RawConnection

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security import scram

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_carol="carol-secret";')
_SIZE = struct.Struct(">i")


def _sasl_overrides(**extra: str) -> dict[str, str]:
    return {"sasl.enabled.mechanisms": MECHANISMS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "group.initial.rebalance.delay.ms": "0", **extra}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerProcess]:
    """SASL_SSL, SASL_PLAINTEXT and a PLAINTEXT listener on loopback for the admin."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("sasl") / "data",
        listeners="SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides=_sasl_overrides(**{
            "advertised.listeners": "SASL_SSL://localhost:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem")}))
    process.start()
    _gregor("users", "create", "alice", "-b", process.bootstrap_for("PLAINTEXT"),
            stdin="alice-secret\n")
    yield process
    process.stop()


def _gregor(*args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gregor.cli.main", *args], input=stdin,
                            capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def _confluent(broker: BrokerProcess, certs: Path, mechanism: str, username: str,
               password: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap_for("SASL_SSL", "localhost"),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
            "sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password}


def _confluent_round_trip(config: dict[str, str], topic: str) -> list[bytes]:
    producer = Producer(config)
    producer.produce(topic, value=b"secret")
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while not values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize(("mechanism", "username", "password"), [
    ("PLAIN", "carol", "carol-secret"),
    ("SCRAM-SHA-256", "alice", "alice-secret"),
    ("SCRAM-SHA-512", "alice", "alice-secret"),
])
def test_confluent_over_sasl_ssl(secured: BrokerProcess, certs: Path, topic_name: str,
                                 mechanism: str, username: str, password: str) -> None:
    """librdkafka's produce, group consume and commit, all over SASL_SSL."""
    config = _confluent(secured, certs, mechanism, username, password)
    assert _confluent_round_trip(config, topic_name) == [b"secret"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_python_clients_over_sasl_ssl(secured: BrokerProcess, certs: Path, topic_name: str,
                                      mechanism: str) -> None:
    username, password = ("carol", "carol-secret") if mechanism == "PLAIN" else (
        "alice", "alice-secret")
    bootstrap = secured.bootstrap_for("SASL_SSL", "localhost")
    credentials = {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
                   "sasl_plain_username": username, "sasl_plain_password": password}
    producer = KafkaProducer(bootstrap_servers=bootstrap, ssl_cafile=str(certs / "ca.pem"),
                             **credentials)
    producer.send(topic_name, b"from kafka-python").get(TIMEOUT)
    producer.close()

    async def aiokafka_round_trip() -> list[bytes]:
        context = create_ssl_context(cafile=str(certs / "ca.pem"))
        aio_producer = AIOKafkaProducer(bootstrap_servers=bootstrap, ssl_context=context,
                                        **credentials)
        await aio_producer.start()
        try:
            await aio_producer.send_and_wait(topic_name, b"from aiokafka")
        finally:
            await aio_producer.stop()
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=bootstrap,
                                    ssl_context=context, auto_offset_reset="earliest",
                                    **credentials)
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=int(TIMEOUT * 1000), max_records=2)
            return [m.value for records in batches.values() for m in records]
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_round_trip()) == [b"from kafka-python", b"from aiokafka"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_ssl_with_scram(secured: BrokerProcess, certs: Path,
                                       topic_name: str) -> None:
    base = ["kcat", "-b", secured.bootstrap_for("SASL_SSL", "localhost"), "-q",
            "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
            "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice",
            "-X", "sasl.password=alice-secret"]
    subprocess.run([*base, "-P", "-t", topic_name], input=b"one\ntwo\n", check=True,
                   timeout=TIMEOUT)
    out = subprocess.run([*base, "-C", "-t", topic_name, "-e", "-o", "beginning"],
                         capture_output=True, check=True, timeout=TIMEOUT).stdout
    assert out.split() == [b"one", b"two"]


@pytest.mark.parametrize(("mechanism", "username"), [
    ("PLAIN", "carol"), ("SCRAM-SHA-256", "alice"), ("SCRAM-SHA-512", "alice"),
    ("SCRAM-SHA-256", "nobody"), ("PLAIN", "nobody")])
def test_wrong_password_is_refused(secured: BrokerProcess, certs: Path, mechanism: str,
                                   username: str, caplog: pytest.LogCaptureFixture) -> None:
    """The client learns it failed to authenticate (not a timeout) and gets nothing."""
    errors: list[KafkaError] = []
    admin = AdminClient({**_confluent(secured, certs, mechanism, username, "wrong"),
                         "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    admin.poll(1)  # serves the error callback
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    async def aiokafka_start() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secured.bootstrap_for("SASL_SSL", "localhost"),
            security_protocol="SASL_SSL", sasl_mechanism=mechanism,
            ssl_context=create_ssl_context(cafile=str(certs / "ca.pem")),
            sasl_plain_username=username, sasl_plain_password="wrong")
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AIOKafkaConnectionError):
        asyncio.run(aiokafka_start())
    assert "[Error 58] SaslAuthenticationFailed: Authentication failed" in caplog.text


def _handshake(connection: RawConnection, mechanism: str, version: int = 1) -> object:
    return connection.request(ApiKey.SASL_HANDSHAKE, version,
                              SaslHandshakeRequest(mechanism=mechanism))


def test_failed_authentication_is_answered_slowly_then_closed(secured: BrokerProcess) -> None:
    """SASL_AUTHENTICATION_FAILED after connection.failed.authentication.delay.ms (100 ms by
    default), then the connection is closed: each guess costs a connection and the delay."""
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
        assert _handshake(connection, "PLAIN").error_code == ErrorCode.none
        started = time.monotonic()
        answer = connection.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
            auth_bytes=b"\0carol\0guess"))
        assert time.monotonic() - started >= 0.1
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert "Invalid username or password" in answer.error_message
        assert connection.closed_by_broker()


def test_requests_before_authentication_are_refused(secured: BrokerProcess) -> None:
    """ApiVersions is answered (clients ask first); anything else closes the connection
    unanswered, as Kafka does."""
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
        assert ApiKey.SASL_AUTHENTICATE in api_versions(connection)
        connection.send(ApiKey.METADATA, 12, MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        assert connection.closed_by_broker()
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
        answer = _handshake(connection, "GSSAPI")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == set(MECHANISMS.split(","))
        assert connection.closed_by_broker()


def test_sasl_requests_outside_an_exchange_are_illegal(secured: BrokerProcess) -> None:
    """Advertised everywhere (Kafka does); on a plaintext listener: ILLEGAL_SASL_STATE."""
    with RawConnection(secured.bootstrap_for("PLAINTEXT")) as connection:
        versions = api_versions(connection)
        assert (versions[ApiKey.SASL_HANDSHAKE], versions[ApiKey.SASL_AUTHENTICATE]) == (
            range(0, 2), range(0, 3))
        assert _handshake(connection, "PLAIN").error_code == ErrorCode.illegal_sasl_state


def test_handshake_v0_then_bare_tokens(secured: BrokerProcess) -> None:
    """Older clients send SaslHandshake v0 and then the mechanism's tokens as bare
    size-prefixed frames (no SaslAuthenticate), and read the answers the same way.
    SCRAM's side is kafka-python's client, which checks the server's signature."""
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
            assert _handshake(connection, mechanism, version=0).error_code == ErrorCode.none
            if mechanism == "PLAIN":
                connection.send_raw(_bare(b"\0carol\0carol-secret"))
                assert connection.read_frame() == b""
            else:
                client = ScramClient("alice", "alice-secret", mechanism)
                connection.send_raw(_bare(client.first_message()))
                client.process_server_first_message(connection.read_frame())
                connection.send_raw(_bare(client.final_message()))
                client.process_server_final_message(connection.read_frame())
            metadata = connection.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False))
            assert metadata.brokers
        with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
            assert _handshake(connection, "PLAIN", version=0).error_code == ErrorCode.none
            connection.send_raw(_bare(b"\0carol\0wrong"))
            assert connection.closed_by_broker()


def _bare(token: bytes) -> bytes:
    return _SIZE.pack(len(token)) + token


def test_malformed_sasl_frames_never_take_the_broker_down(secured: BrokerProcess,
                                                          certs: Path) -> None:
    """Random and truncated tokens, both framings, absurd sizes: each costs at most its
    own connection; the broker answers an authenticated client afterwards."""
    rng = random.Random(25)
    scram_first = ScramClient("alice", "alice-secret", "SCRAM-SHA-256").first_message()
    tokens = [b"", b"\0", b"n,,", b"n,,n=alice", b"y,,n=,r=", b"p=tls-unique,,n=a,r=b",
              b"n,,n=alice,r=x,tokenauth=true", b"c=biws,r=x,p=AAAA", scram_first[:-3],
              scram_first + b",x", b"\xff\xfe" * 10, os.urandom(600)]
    tokens += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))
               for _ in range(30)]
    bootstrap = secured.bootstrap_for("SASL_PLAINTEXT")
    for index, token in enumerate(tokens):
        mechanism = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")[index % 3]
        with RawConnection(bootstrap, timeout=5) as connection:
            version = index % 2
            assert _handshake(connection, mechanism, version).error_code == ErrorCode.none
            if version:
                answer = connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                            SaslAuthenticateRequest(auth_bytes=token))
                if answer.error_code == ErrorCode.none:
                    # A well-formed SCRAM first message: the proof that follows is garbage.
                    answer = connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                                SaslAuthenticateRequest(auth_bytes=token))
                assert answer.error_code == ErrorCode.sasl_authentication_failed
            else:
                connection.send_raw(_bare(token))
            assert connection.closed_by_broker() or connection.read_frame() is not None
    for size in (-1, 2**31 - 1, 10 * 1024 * 1024):  # above sasl.server.max.receive.size
        with RawConnection(bootstrap, timeout=5) as connection:
            connection.send_raw(_SIZE.pack(size) + b"\0" * 16)
            assert connection.closed_by_broker()
    config = _confluent(secured, certs, "SCRAM-SHA-256", "alice", "alice-secret")
    assert AdminClient(config).list_topics(timeout=TIMEOUT).brokers


def test_users_cli_and_the_credentials_it_makes(secured: BrokerProcess, certs: Path,
                                                topic_name: str) -> None:
    """gregor users create/describe/delete, and what each means to a client."""
    admin = ["-b", secured.bootstrap_for("PLAINTEXT")]
    _gregor("users", "create", "dave", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
            "--password", "dave-secret", *admin)
    described = _gregor("users", "describe", *admin).stdout
    assert "dave\tSCRAM-SHA-512 (iterations 8192)" in described
    assert "alice\tSCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 4096)" in (
        described)
    config = _confluent(secured, certs, "SCRAM-SHA-512", "dave", "dave-secret")
    assert _confluent_round_trip(config, topic_name) == [b"secret"]
    # Only the mechanism created: SCRAM-SHA-256 has no credential for dave.
    with pytest.raises(KafkaException):
        AdminClient(_confluent(secured, certs, "SCRAM-SHA-256", "dave", "dave-secret")
                    ).list_topics(timeout=2)
    # A new password replaces the old one at once.
    _gregor("users", "create", "dave", "--mechanism", "SCRAM-SHA-512", *admin,
            stdin="new-secret\n")
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=2)
    _gregor("users", "delete", "dave", *admin)
    missing = _gregor("users", "describe", "dave", *admin, check=False)
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    with pytest.raises(KafkaException):
        AdminClient(_confluent(secured, certs, "SCRAM-SHA-512", "dave", "new-secret")
                    ).list_topics(timeout=2)


def test_quotas_cli_over_sasl_ssl_and_a_user_held_to_its_quota(
        secured: BrokerProcess, certs: Path, topic_name: str) -> None:
    """``gregor quotas`` takes librdkafka's security settings; a user's quota holds every
    client id of the principal that authenticated."""
    def quotas(*args: str, password: str = "alice-secret") -> subprocess.CompletedProcess[str]:
        return _gregor("quotas", *args, "-b", secured.bootstrap_for("SASL_SSL", "localhost"),
                       "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-256",
                       "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
                       "-X", f"ssl.ca.location={certs / 'ca.pem'}", check=False)

    assert quotas("alter", "--user", "alice", "--add", "producer_byte_rate=20000",
                  password="wrong").returncode != 0
    assert quotas("alter", "--user", "alice", "--add", "producer_byte_rate=20000"
                  ).returncode == 0
    try:
        assert quotas("describe", "--user", "alice").stdout == (
            "Quotas of user 'alice': producer_byte_rate=20000\n")
        throttles: list[int] = []
        producer = Producer({**_confluent(secured, certs, "SCRAM-SHA-256", "alice",
                                          "alice-secret"), "client.id": f"any-{topic_name}",
                             "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        # 200 KB: ten seconds of alice's quota.
        for _ in range(200):
            producer.produce(topic_name, value=b"q" * 1000)
        producer.flush(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while not throttles and time.monotonic() < deadline:
            producer.poll(0.1)
        assert throttles and max(throttles) > 0
    finally:
        assert quotas("alter", "--user", "alice", "--delete", "producer_byte_rate"
                      ).returncode == 0


def test_scram_admin_api_errors(secured: BrokerProcess) -> None:
    """KIP-554's per-user errors, as Kafka answers them."""
    upsert = alter_request.ScramCredentialUpsertion
    salt = b"salt" * 4
    with RawConnection(secured.bootstrap_for("PLAINTEXT")) as connection:
        answer = connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                    alter_request.AlterUserScramCredentialsRequest(
            deletions=(alter_request.ScramCredentialDeletion(name="ghost", mechanism=1),),
            upsertions=(
                upsert(name="few", mechanism=1, iterations=1000, salt=salt,
                       salted_password=b"x" * 32),
                upsert(name="many", mechanism=2, iterations=20000, salt=salt,
                       salted_password=b"x" * 64),
                upsert(name="odd", mechanism=7, iterations=4096, salt=salt,
                       salted_password=b"x" * 32),
                upsert(name="twice", mechanism=1, iterations=4096, salt=salt,
                       salted_password=b"x" * 32),
                upsert(name="twice", mechanism=1, iterations=4096, salt=salt,
                       salted_password=b"y" * 32),
                upsert(name="good", mechanism=1, iterations=4096, salt=salt,
                       salted_password=scram.salted_password("SCRAM-SHA-256", "pw", salt,
                                                             4096)))))
        results = {r.user: r.error_code for r in answer.results}
        assert results == {
            "ghost": ErrorCode.resource_not_found, "few": ErrorCode.unacceptable_credential,
            "many": ErrorCode.unacceptable_credential,
            "odd": ErrorCode.unsupported_sasl_mechanism,
            "twice": ErrorCode.duplicate_resource, "good": ErrorCode.none}
        described = connection.request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
            describe_request.DescribeUserScramCredentialsRequest(users=(
                describe_request.UserName(name="good"), describe_request.UserName(name="few"),
                describe_request.UserName(name="good"))))
    assert [(r.user, r.error_code) for r in described.results] == [
        ("good", ErrorCode.duplicate_resource), ("few", ErrorCode.resource_not_found)]
    # The salted password the client sent authenticates the user it names.
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as connection:
        _handshake(connection, "SCRAM-SHA-256")
        client = ScramClient("good", "pw", "SCRAM-SHA-256")
        first = connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                   SaslAuthenticateRequest(auth_bytes=client.first_message()))
        client.process_server_first_message(first.auth_bytes)
        final = connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                   SaslAuthenticateRequest(auth_bytes=client.final_message()))
        assert final.error_code == ErrorCode.none
        client.process_server_final_message(final.auth_bytes)


def test_credentials_survive_a_restart(tmp_path: Path) -> None:
    """Alone, a broker keeps SCRAM credentials in its metadata file."""
    broker = BrokerProcess(tmp_path / "data",
                           listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                           overrides=_sasl_overrides())
    with broker:
        _gregor("users", "create", "erin", "--password", "erin-secret",
                "-b", broker.bootstrap_for("PLAINTEXT"))
        broker.restart()
        config = {"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                  "sasl.username": "erin", "sasl.password": "erin-secret"}
        assert AdminClient(config).list_topics(timeout=TIMEOUT).brokers


def test_sasl_listener_needs_usable_mechanisms(tmp_path: Path) -> None:
    """Kafka's default mechanism is GSSAPI (Kerberos), which is not served; PLAIN needs
    its users: either stops the broker before it serves."""
    for overrides, reason in (({}, "GSSAPI"),
                              ({"sasl.enabled.mechanisms": "PLAIN"}, "sasl.jaas.config")):
        process = BrokerProcess(tmp_path / "data", listeners="SASL_PLAINTEXT://127.0.0.1:0",
                                overrides=overrides)
        with pytest.raises(RuntimeError, match=reason):
            process.start()


# --------------------------------------------------------- re-authentication (KIP-368)
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def expiring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Sessions of 1.5 s (connections.max.reauth.ms)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("reauth") / "data",
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides=_sasl_overrides(**{"connections.max.reauth.ms": str(REAUTH_MS)}))
    process.start()
    _gregor("users", "create", "alice", "-b", process.bootstrap_for("PLAINTEXT"),
            stdin="alice-secret\n")
    yield process
    process.stop()


def _plain(connection: RawConnection, username: str, password: str) -> object:
    return connection.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
        auth_bytes=f"\0{username}\0{password}".encode()))


def _metadata(connection: RawConnection) -> object:
    return connection.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def test_session_expires_unless_renewed(expiring: BrokerProcess) -> None:
    """The client is told the session's lifetime; re-authenticating on the connection
    renews it; a session left to expire ends the connection."""
    bootstrap = expiring.bootstrap_for("SASL_PLAINTEXT")
    with RawConnection(bootstrap) as connection:
        _handshake(connection, "PLAIN")
        answer = _plain(connection, "carol", "carol-secret")
        assert answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        started = time.monotonic()
        time.sleep(1.0)
        assert _handshake(connection, "PLAIN").error_code == ErrorCode.none
        renewed = _plain(connection, "carol", "carol-secret")
        assert renewed.error_code == ErrorCode.none and renewed.session_lifetime
        time.sleep(started + REAUTH_MS / 1000 + 0.5 - time.monotonic())
        assert _metadata(connection).brokers  # past the first session's end
        connection.sock.settimeout(5)
        assert connection.closed_by_broker()  # the renewed one ends too
        assert time.monotonic() - started >= 2 * REAUTH_MS / 1000 - 0.6


@pytest.mark.parametrize(("mechanism", "username", "password", "reason"), [
    ("PLAIN", "carol", "wrong", "Invalid username or password"),
    ("PLAIN", "admin", "admin-secret", "Cannot change principals"),
    ("SCRAM-SHA-256", "carol", "carol-secret", None)])
def test_failed_reauthentication_ends_the_connection(
        expiring: BrokerProcess, mechanism: str, username: str, password: str,
        reason: str | None) -> None:
    with RawConnection(expiring.bootstrap_for("SASL_PLAINTEXT")) as connection:
        _handshake(connection, "PLAIN")
        _plain(connection, "carol", "carol-secret")
        handshake = _handshake(connection, mechanism)
        if reason is None:  # another mechanism than the session's
            assert handshake.error_code == ErrorCode.unsupported_sasl_mechanism
        else:
            answer = _plain(connection, username, password)
            assert answer.error_code == ErrorCode.sasl_authentication_failed
            assert reason in answer.error_message
        assert connection.closed_by_broker()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_clients_reauthenticate_and_keep_their_connections(
        expiring: BrokerProcess, topic_name: str, mechanism: str) -> None:
    """librdkafka and kafka-python re-authenticate before their sessions end: a producer
    sending for several lifetimes never loses its connection."""
    username, password = ("carol", "carol-secret") if mechanism == "PLAIN" else (
        "alice", "alice-secret")
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": expiring.bootstrap_for("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": username, "sasl.password": password,
                         "error_cb": errors.append})
    python_producer = KafkaProducer(
        bootstrap_servers=expiring.bootstrap_for("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
        sasl_plain_username=username, sasl_plain_password=password)
    try:
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            producer.produce(topic_name, value=b"x")
            python_producer.send(topic_name, b"y").get(TIMEOUT)
            assert producer.flush(TIMEOUT) == 0
            time.sleep(0.1)
    finally:
        python_producer.close()
    assert errors == []  # a connection closed at a session's end would be reported here

