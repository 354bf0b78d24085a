"""The test harness itself: brokers bind their own port and say when they serve."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clients import WireConnection, metadata_request
from kazoo.client import KazooClient

from gregor.broker.process import BrokerProcess
from gregor.cluster.znodes import broker_path
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE

# What the broker logs when it has opened its logs (gregor.storage.log_manager).
_LOGS_LOADED = "gregor.storage.log_manager: loaded"


def test_reports_the_port_it_bound_and_serves_at_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"node.id": "7"})
    # A killed run's ready file is not this run's word.
    broker.ready_file.write_text(json.dumps({"broker_id": 7, "host": "127.0.0.1", "port": 1,
                                             "pid": 1}))
    with broker:
        assert broker.port not in (0, 1) and broker.broker_id == 7
        assert json.loads(broker.ready_file.read_text()) == {
            "broker_id": 7, "host": "127.0.0.1", "port": broker.port, "pid": broker.pid,
            "listeners": {"PLAINTEXT": broker.port}}
        # Ready means serving: the first request is answered, with that address.
        with WireConnection(broker.bootstrap) as connection:
            answer = connection.request(ApiKey.METADATA, 12, metadata_request([], False))
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
            (7, "127.0.0.1", broker.port)]
    assert not broker.ready_file.exists()  # a clean stop withdraws it


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


def test_a_port_taken_before_a_restart_fails_it_at_once(tmp_path: Path) -> None:
    """Another process takes the port between a kill -9 and the restart: the broker
    says so and exits before it even opens its logs (which after a crash can take long
    to recover), instead of the harness waiting out its timeout or, counting any
    accepted connection as started, handing the tests the other process."""
    broker = BrokerProcess(tmp_path / "data").start()
    port = broker.port
    broker.kill()
    with socket.create_server(("127.0.0.1", port)):
        with pytest.raises(RuntimeError, match="broker exited with 1 before serving") as failure:
            broker.start()
        error = str(failure.value)
        assert "address already in use" in error.lower() and str(port) in error
        assert _LOGS_LOADED not in broker.log_tail(lines=1000)
    # The port is the one clients know: once it is free again, the broker gets it back.
    assert broker.start().port == port
    broker.stop()


def test_a_broker_that_accepts_is_not_ready_until_registered(tmp_path: Path) -> None:
    """Restarted right after a kill -9, a cluster broker listens at once but must wait
    for its previous ZooKeeper session to expire before it can register: the harness
    waits for the broker's word, so the registration is there when ``start`` returns."""
    with ZooKeeperServer(tmp_path / "zookeeper", force_sync=False) as zookeeper:
        broker = BrokerProcess(tmp_path / "data", overrides={
            "zookeeper.connect": f"{zookeeper.connect}/harness", "broker.id": "1",
            "zookeeper.session.timeout.ms": "6000"})
        registration = f"/harness{broker_path(1)}"
        zk = KazooClient(zookeeper.connect)
        zk.start(30)
        try:
            broker.start()
            before = zk.exists(registration)
            assert before is not None
            broker.kill()
            broker.start()
            after = zk.exists(registration)
            assert after is not None and after.ephemeralOwner != before.ephemeralOwner
            # The case in point: it accepted connections before it had registered.
            log = broker.log_tail(lines=1000)
            assert log.index("listening on") < log.index("registered broker 1")
        finally:
            broker.kill()
            zk.stop()
            zk.close()


def test_a_background_job_of_a_script_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """bash starts a script's background jobs ignoring SIGINT; on Ctrl-C the terminal
    sends them SIGINT anyway and the script's trap sends SIGTERM. The broker keeps
    ignoring SIGINT, as it was started, so the SIGTERM is its first signal and it
    stops cleanly, where a second signal would have ended it at once."""
    data, ready = tmp_path / "data", tmp_path / "ready"
    broker = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "broker", "start", "--log-dirs", str(data),
         "--listeners", "PLAINTEXT://127.0.0.1:0", "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert broker.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        broker.send_signal(signal.SIGINT)
        time.sleep(0.2)
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0
        assert (data / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        broker.kill()
        broker.wait()
