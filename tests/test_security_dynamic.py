"""Security settings changed while the broker runs, as Kafka lets an operator change them:
a listener's key store rotated through IncrementalAlterConfigs on the broker resource
(confluent-kafka's admin client), new connections offered the new certificate at once,
open ones kept, a key store that cannot be loaded refused, and the change kept across a
restart."""

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
