"""Security settings changed while the broker runs, as Kafka lets an operator change them:
a listener's key store rotated through IncrementalAlterConfigs on the broker resource
(confluent-kafka's admin client), new connections offered the new certificate at once,
open ones kept, a key store that cannot be loaded refused, and the change kept across a
restart; SASL settings (enabled mechanisms, PLAIN users, Kerberos ones) likewise."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from gregor.broker.process import BrokerProcess
from gregor.client.connection import (
    AuthenticationRefused,
    BrokerConnection,
    ClientSettings,
    client_security,
)
from gregor.config import ConfigSource
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import encode_request

_SIZE = struct.Struct(">i")
_KEY_STORE = "listener.name.ssl.ssl.keystore.location"


def _tls(broker: BrokerProcess, ca: Path) -> ssl.SSLSocket:
    """A TLS connection to the SSL listener that trusts only ``ca``."""
    context = ssl.create_default_context(cafile=str(ca))
    host, port = broker.bootstrap_for("SSL", "localhost").rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    try:
        return context.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def _trusted(broker: BrokerProcess, ca: Path) -> bool:
    try:
        _tls(broker, ca).close()
    except ssl.SSLCertVerificationError:
        return False
    return True


def _served(connection: ssl.SSLSocket) -> bool:
    """Whether an open connection is still answered (ApiVersions v0)."""
    connection.sendall(encode_request(ApiKey.API_VERSIONS, 0, 7, "t", ApiVersionsRequest()))
    answers = connection.makefile("rb")
    (size,) = _SIZE.unpack(answers.read(4))
    return len(answers.read(size)) == size


def _alter(broker: BrokerProcess, name: str, value: str) -> str | None:
    """Set one broker config; the error's text, None when accepted."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    future = admin.incremental_alter_configs([ConfigResource(
        ResourceType.BROKER, str(broker.broker_id), incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])])
    try:
        next(iter(future.values())).result(30)
    except Exception as exc:  # confluent-kafka's KafkaException, the broker's error in it
        return str(exc)
    return None


def test_a_key_store_is_rotated_without_a_restart(tmp_path: Path, certs: Path) -> None:
    rotated = tmp_path / "rotated"  # another CA, so who serves which is plain to see
    subprocess.run([str(Path(__file__).resolve().parent.parent / "scripts" / "make-certs.sh"),
                    str(rotated)], check=True, capture_output=True)
    broker = BrokerProcess(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,"
                           "SSL://127.0.0.1:0", overrides={
                               "advertised.listeners": "SSL://localhost:0",
                               "ssl.keystore.type": "PEM",
                               "ssl.keystore.location": str(certs / "broker.pem")})
    broker.start()
    try:
        assert _trusted(broker, certs / "ca.pem")
        assert not _trusted(broker, rotated / "ca.pem")
        before = _tls(broker, certs / "ca.pem")

        # Refused: a key store that does not load; listener settings other than the key
        # store's (they stay static).
        refused = _alter(broker, _KEY_STORE, str(tmp_path / "missing.pem"))
        assert refused is not None and "INVALID_CONFIG" in refused
        refused = _alter(broker, "listener.name.ssl.ssl.client.auth", "required")
        assert refused is not None and "INVALID_REQUEST" in refused
        assert _trusted(broker, certs / "ca.pem")

        assert _alter(broker, _KEY_STORE, str(rotated / "broker.pem")) is None
        assert _trusted(broker, rotated / "ca.pem")
        assert not _trusted(broker, certs / "ca.pem")
        assert _served(before)  # a connection made before keeps its session
        before.close()

        broker.stop()
        broker.start()
        assert _trusted(broker, rotated / "ca.pem")
    finally:
        broker.stop()


_JAAS = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required "


def _authenticates(broker: BrokerProcess, user: str, password: str) -> bool:
    """Whether a PLAIN login on the SASL_PLAINTEXT listener is accepted."""
    host, port = broker.bootstrap_for("SASL_PLAINTEXT").rsplit(":", 1)
    settings = ClientSettings(((host, int(port)),), security=client_security({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": user, "sasl.password": password}))
    try:
        BrokerConnection((host, int(port)), settings).close()
    except AuthenticationRefused:
        return False
    return True


def test_sasl_settings_change_without_a_restart(tmp_path: Path) -> None:
    """Kafka's per-broker dynamic SASL settings: the Kerberos ones librdkafka's admin test
    alters are accepted and described back (nothing here speaks Kerberos); a listener's
    PLAIN users and enabled mechanisms apply to the next logins; a setting no listener
    can serve with is refused; the change outlives a restart."""
    broker = BrokerProcess(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,"
                           "SASL_PLAINTEXT://127.0.0.1:0", overrides={
                               "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                               _JAAS: _PLAIN_LOGIN + 'user_carol="carol-secret";'})
    broker.start()
    try:
        assert _alter(broker, "sasl.kerberos.min.time.before.relogin", "58000") is None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ResourceType.BROKER, str(broker.broker_id))
        described = next(iter(admin.describe_configs([resource]).values())).result(30)
        relogin = described["sasl.kerberos.min.time.before.relogin"]
        assert (relogin.value, relogin.is_read_only) == ("58000", False)
        assert relogin.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

        assert _authenticates(broker, "carol", "carol-secret")
        assert not _authenticates(broker, "dave", "dave-secret")
        assert _alter(broker, _JAAS, _PLAIN_LOGIN + 'user_dave="dave-secret";') is None
        assert _authenticates(broker, "dave", "dave-secret")
        assert not _authenticates(broker, "carol", "carol-secret")

        refused = _alter(broker, "sasl.enabled.mechanisms", "GSSAPI")
        assert refused is not None and "INVALID_CONFIG" in refused
        assert _alter(broker, "sasl.enabled.mechanisms", "SCRAM-SHA-256") is None
        assert not _authenticates(broker, "dave", "dave-secret")

        broker.stop()
        broker.start()
        assert not _authenticates(broker, "dave", "dave-secret")  # the change was kept
    finally:
        broker.stop()
