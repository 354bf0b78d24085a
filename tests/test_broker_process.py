"""The test harness itself: brokers bind their own port and say when they serve."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from clients import WireConnection, metadata_request

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey


def test_reports_the_port_it_bound_and_serves_at_once(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        assert broker.port > 0
        # Ready means serving: the first request is answered, with that address.
        with WireConnection(broker.bootstrap) as connection:
            answer = connection.request(ApiKey.METADATA, 12, metadata_request([], False))
        assert [(b.host, b.port) for b in answer.brokers] == [("127.0.0.1", broker.port)]
        ready = json.loads((tmp_path / "data.ready").read_text())
        assert (ready["port"], ready["pid"]) == (broker.port, broker.pid)


def test_restart_after_kill_comes_back_on_the_same_port(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    port = broker.port
    try:
        broker.kill()
        broker.start()
        assert broker.port == port
        with WireConnection(broker.bootstrap) as connection:
            connection.request(ApiKey.METADATA, 12, metadata_request([], False))
    finally:
        broker.stop()


def test_a_taken_port_fails_fast_and_says_why(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        broker = BrokerProcess(tmp_path / "data", port=taken.getsockname()[1])
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="exited") as failure:
            broker.start()
        assert time.monotonic() - started < 30
        assert "address already in use" in str(failure.value).lower()


def test_listening_is_not_ready(tmp_path: Path) -> None:
    """A socket that accepts is not a broker that serves: the harness waits for the
    broker's own word, which a stale ready file from an earlier run must not fake."""
    (tmp_path / "data.ready").write_text(json.dumps({"port": 1}))
    with BrokerProcess(tmp_path / "data") as broker:
        assert broker.port != 1
