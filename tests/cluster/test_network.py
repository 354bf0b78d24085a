"""The partition helper cuts exactly the link it is asked to, and heals it."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest
from network import Network, loopback_block, sources

WAIT_S = 30.0
# Long enough for a loopback SYN to be answered many times over, even on a loaded
# machine: the kernel answers it, no process has to be scheduled.
CONNECT_S = 1.0


@pytest.fixture
def network() -> Iterator[Network]:
    cutter = Network()
    yield cutter
    cutter.heal_all()


@pytest.fixture
def hosts() -> tuple[str, str]:
    block = loopback_block()
    return f"{block}.2", f"{block}.3"


def listen(host: str) -> socket.socket:
    server = socket.socket()
    server.bind((host, 0))
    server.listen()
    return server


def connect(source: str | None, server: socket.socket) -> socket.socket:
    client = socket.socket()
    if source is not None:
        client.bind((source, 0))
    client.settimeout(CONNECT_S)
    client.connect(server.getsockname())
    client.settimeout(WAIT_S)
    return client


def test_a_cut_link_carries_nothing_until_healed(network: Network,
                                                 hosts: tuple[str, str]) -> None:
    a, b = hosts
    server = listen(b)
    established = connect(a, server)
    accepted, _ = server.accept()
    accepted.settimeout(WAIT_S)

    network.cut(a, b)
    assert network.is_cut(b, a)
    with pytest.raises(TimeoutError):
        connect(a, server)  # the SYN is dropped: no refusal, no answer
    # The other way too, and from a third address the server is still reachable.
    with pytest.raises(TimeoutError):
        connect(b, listen(a))
    connect(None, server).close()
    established.sendall(b"sent while cut")

    network.heal(a, b)
    assert not network.is_cut(a, b)
    # The established connection was stalled, not reset: TCP retransmits once healed.
    assert accepted.recv(100) == b"sent while cut"
    connect(a, server).close()


def test_sources_are_the_addresses_a_cut_must_match(hosts: tuple[str, str]) -> None:
    a, b = hosts
    server = listen(b)
    bound, unbound = connect(a, server), connect(None, server)
    # An unbound socket sends from 127.0.0.1 whatever loopback address it reaches:
    # a cut between a and b would not touch it.
    assert sources(os.getpid(), b) == {a, "127.0.0.1"}
    bound.close()
    unbound.close()


def test_cuts_left_by_a_dead_test_run_are_removed() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    table = f"gregor_cut_{dead.pid}_0"
    subprocess.run(["nft", "add", "table", "ip", table], check=True)
    Network()
    listed = subprocess.run(["nft", "list", "tables", "ip"], capture_output=True, text=True,
                            check=True).stdout
    assert table not in listed.split()
