"""The console against a secured broker: a SASL_SSL listener only, with SCRAM, the
console's clients configured with librdkafka's security settings (``-X``) as any
``gregor`` command's."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_harness import Console

from gregor.broker.process import BrokerProcess

PASSWORD = "admin-secret"


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory: pytest.TempPathFactory, certs: Path
                    ) -> Iterator[BrokerProcess]:
    """Clients on SASL_SSL; a PLAINTEXT listener on loopback only to create the user."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("secured-console") / "data",
        listeners="SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={"advertised.listeners": "SASL_SSL://localhost:0",
                   "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                   "ssl.keystore.type": "PEM",
                   "ssl.keystore.location": str(certs / "broker.pem")})
    process.start()
    subprocess.run([sys.executable, "-m", "gregor.cli.main", "users", "create", "admin",
                    "--password", PASSWORD, "-b", process.bootstrap_for("PLAINTEXT")],
                   check=True, capture_output=True, timeout=60)
    yield process
    process.stop()


def test_the_console_works_against_a_sasl_ssl_listener(sasl_ssl_broker: BrokerProcess,
                                                        certs: Path) -> None:
    console = Console.start(sasl_ssl_broker.bootstrap_for("SASL_SSL", "localhost"),
                            client_properties=[
                                "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                                "sasl.username=admin", f"sasl.password={PASSWORD}",
                                f"ssl.ca.location={certs / 'ca.pem'}"])
    try:
        status, answer = console.api("POST", "/api/topics",
                                     {"name": "secured", "partitions": 2})
        assert status == 201, answer
        status, answer = console.api("POST", "/api/topics/secured/messages",
                                     {"partition": 0, "value": "over SASL_SSL"})
        assert status == 201, answer
        status, topic = console.api("GET", "/api/topics/secured")
        assert status == 200 and len(topic["partitions"]) == 2
        status, page = console.api(
            "GET", "/api/topics/secured/messages?start=beginning&limit=10")
        assert status == 200
        assert [base64.b64decode(m["value"]) for m in page["messages"]] == [b"over SASL_SSL"]
    finally:
        console.stop()
