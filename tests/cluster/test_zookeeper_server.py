"""ZooKeeperServer runs Debian's ZooKeeper the way the cluster tests and
``scripts/run-cluster.sh`` rely on: ready when it says so, sessions with short
timeouts, clean stops, restarts on its port, and no two servers on one port."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from foreground import default_sigint
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent
from network import loopback_block

from gregor.cluster.zookeeper_server import ZooKeeperServer, tcp_sockets

WAIT_S = 30.0


@pytest.fixture
def client(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    kazoo = KazooClient(zookeeper.connect, timeout=2.0)
    kazoo.start(WAIT_S)
    yield kazoo
    kazoo.stop()
    kazoo.close()


def test_an_ephemeral_node_lives_as_long_as_its_session(
        zookeeper: ZooKeeperServer, client: KazooClient) -> None:
    owner = KazooClient(zookeeper.connect, timeout=2.0)
    owner.start(WAIT_S)
    owner.create("/broker-1", b"here", ephemeral=True, makepath=True)
    assert owner.client_id is not None and owner.client_id[0] != 0
    gone = threading.Event()

    def watch(event: WatchedEvent) -> None:
        if event.type == "DELETED":
            gone.set()

    assert client.exists("/broker-1", watch=watch) is not None
    owner.stop()  # closes the session: ZooKeeper deletes its ephemeral nodes
    owner.close()
    assert gone.wait(WAIT_S)
    assert client.exists("/broker-1") is None


def test_a_session_shorter_than_two_seconds_is_granted(
        zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture) -> None:
    """Fault tests run brokers with 2 s sessions; ZooKeeper's default floor is two ticks
    of 2 s. The server grants what is asked within [min, max]: its connect answer says
    what it granted (kazoo logs it at its BLATHER level, 5)."""
    caplog.set_level(5, logger="kazoo.client")
    kazoo = KazooClient(zookeeper.connect, timeout=1.5)
    kazoo.start(WAIT_S)
    kazoo.stop()
    kazoo.close()
    assert re.findall(r"negotiated session timeout: (\d+)", caplog.text) == ["1500"]


def test_stop_is_clean_and_a_restart_keeps_the_data_and_the_port(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, host=f"{loopback_block()}.1").start()
    try:
        port = server.port
        kazoo = KazooClient(server.connect)
        kazoo.start(WAIT_S)
        kazoo.create("/kept", b"value")
        kazoo.stop()
        kazoo.close()
        pid = server.pid
        assert server.stop() == 128 + signal.SIGTERM  # the JVM's exit on SIGTERM
        assert server.proc is None and not Path(f"/proc/{pid}").exists()
        server.start()
        assert server.port == port
        kazoo = KazooClient(server.connect)
        kazoo.start(WAIT_S)
        assert kazoo.get("/kept")[0] == b"value"
        kazoo.stop()
        kazoo.close()
    finally:
        server.kill()


def test_a_paused_server_does_not_answer_until_resumed(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path, host=f"{loopback_block()}.1") as server:
        server.pause()
        assert not server.is_ok()
        server.resume()
        assert server.is_ok()


def test_two_servers_do_not_collide(tmp_path: Path) -> None:
    host = f"{loopback_block()}.1"
    with ZooKeeperServer(tmp_path / "a", host=host) as first, \
            ZooKeeperServer(tmp_path / "b", host=host) as second:
        assert first.port != second.port
        clients = [KazooClient(server.connect) for server in (first, second)]
        for kazoo in clients:
            kazoo.start(WAIT_S)
        clients[0].create("/only-in-the-first", b"")
        assert clients[1].exists("/only-in-the-first") is None
        for kazoo in clients:
            kazoo.stop()
            kazoo.close()
        # A server asking for a port another holds fails at once: it must not take the
        # other's ``imok`` for its own.
        taken = ZooKeeperServer(tmp_path / "c", host=host, port=first.port)
        with pytest.raises(RuntimeError, match="address in use"):
            taken.start()
        assert taken.proc is None


def test_a_port_taken_before_zookeeper_binds_it_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race of picking a port: another process binds it before ZooKeeper does."""
    host = f"{loopback_block()}.1"
    squatter = ZooKeeperServer(tmp_path / "squatter", host=host).start()
    picks = iter([squatter.port])
    monkeypatch.setattr("gregor.cluster.zookeeper_server.free_port",
                        lambda: next(picks, 0) or _unused_port(host))
    try:
        with ZooKeeperServer(tmp_path / "server", host=host) as server:
            assert server.port != squatter.port
            assert any(s.listening and s.local == (host, server.port)
                       for s in tcp_sockets(server.pid or 0))
    finally:
        squatter.stop()


def _unused_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _where(pid: int) -> str:
    """A process's state and the kernel function it waits in, if it still runs."""
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if line.startswith("State:"))
        return f"{state.split(':', 1)[1].strip()} in {Path(f'/proc/{pid}/wchan').read_text()}"
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def test_gregor_zookeeper_start_runs_in_the_foreground_until_ctrl_c(tmp_path: Path) -> None:
    host = f"{loopback_block()}.1"
    port = _unused_port(host)
    command = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "zookeeper", "start",
         "--data-dir", str(tmp_path), "--host", host, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        assert command.stdout is not None
        line = command.stdout.readline()
        assert f"ZooKeeper serving on {host}:{port}" in line, command.stderr
        children = Path(f"/proc/{command.pid}/task/{command.pid}/children").read_text().split()
        [java] = [int(pid) for pid in children]
        assert any(s.listening and s.local == (host, port) for s in tcp_sockets(java))
        assert ZooKeeperServer(tmp_path, host=host, port=port).is_ok()
        command.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground command
        try:
            assert command.wait(WAIT_S) == 0
        except subprocess.TimeoutExpired:
            # Say where the command and ZooKeeper were stuck (in CI started with SIGINT
            # ignored, before default_sigint: the command in do_wait, ZooKeeper in futex).
            raise AssertionError(f"still running {WAIT_S} s after Ctrl-C: command "
                                 f"{_where(command.pid)}, ZooKeeper {_where(java)}") from None
        assert not Path(f"/proc/{java}").exists(), "ZooKeeper outlived the command"
        assert command.stderr is not None and command.stderr.read() == ""
    finally:
        command.kill()
