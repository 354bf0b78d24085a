"""socket.send.buffer.bytes and socket.receive.buffer.bytes size the broker's side of
client connections, read back from the kernel with iproute2's ``ss``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from clients import WireConnection
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss")


def _server_side_buffers(broker_port: int, client_port: int) -> tuple[int, int]:
    """``(rb, tb)``: the kernel's receive and send buffer sizes of the broker's socket."""
    out = subprocess.run(
        ["ss", "-tmnH", "state", "established",
         f"( sport = :{broker_port} and dport = :{client_port} )"],
        capture_output=True, text=True, check=True).stdout
    match = re.search(r"rb(\d+),t\d+,tb(\d+)", out)
    assert match, out
    return int(match.group(1)), int(match.group(2))


def _connected(broker: BrokerProcess) -> tuple[WireConnection, int, int]:
    connection = WireConnection(broker.bootstrap)
    # One answered request: the broker has accepted the socket and sized it by now.
    connection.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="gregor-tests", client_software_version="1"))
    broker_port = int(broker.bootstrap.rsplit(":", 1)[1])
    return connection, broker_port, connection.sock.getsockname()[1]


def test_configured_sizes_reach_the_kernel(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={
        "socket.send.buffer.bytes": "262144", "socket.receive.buffer.bytes": "196608"})
    broker.start()
    try:
        connection, broker_port, client_port = _connected(broker)
        with connection:
            # Linux doubles what SO_SNDBUF / SO_RCVBUF ask for, for its bookkeeping.
            assert _server_side_buffers(broker_port, client_port) == (2 * 196608, 2 * 262144)
    finally:
        broker.stop()


def test_default_send_buffer_is_large_and_receive_left_to_the_os(broker: BrokerProcess) -> None:
    wmem_max = int(Path("/proc/sys/net/core/wmem_max").read_text())
    rmem_default = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[1])
    connection, broker_port, client_port = _connected(broker)
    with connection:
        receive, send = _server_side_buffers(broker_port, client_port)
    assert send == 2 * min(4 * 1024 * 1024, wmem_max)
    assert receive >= rmem_default  # autotuned from tcp_rmem's default, never pinned
