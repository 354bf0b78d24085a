"""Network partitions on one machine: every node on a loopback address of its own, and
links between two addresses cut and healed with nftables (needs root and ``nft``;
``scripts/install-zookeeper.sh`` installs it).

Every address in 127.0.0.0/8 reaches this machine, so a broker can listen on its own
(127.a.b.N) and ZooKeeper on another. A cut drops, in the output hook, the packets
from one address to the other in both directions: connections neither open nor carry
data, and established ones stall (as over a real partition, nothing is reset) until
the link is healed.

A packet carries the address its socket was bound to; an unbound client socket
sends from 127.0.0.1 whatever it connects to. So a cut between two brokers holds only
if each binds its outgoing connections (to its peers and to ZooKeeper) to its own
address: ``sources`` shows which address a process's connections really come from.

Each cut is an nftables table of its own, named after the test process, so that
healing is deleting it and a crashed test run's leftovers can be told from the live
cuts of other test runs sharing the machine.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess

from gregor.cluster.zookeeper_server import tcp_sockets

_PREFIX = "gregor_cut_"
_counter = itertools.count()


def loopback_block() -> str:
    """A random 127.a.b prefix: brokers at 127.a.b.<id>, so that neither concurrent test
    runs nor anything on 127.0.0.x shares their addresses (and their cuts)."""
    return f"127.{random.randint(100, 254)}.{random.randint(0, 255)}"


class Network:
    """Cuts and heals links between loopback addresses; ``heal_all`` undoes every cut."""

    def __init__(self) -> None:
        if shutil.which("nft") is None:
            raise RuntimeError("nft not found: scripts/install-zookeeper.sh installs nftables")
        self._cuts: dict[frozenset[str], str] = {}
        _delete_orphans()

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between addresses ``a`` and ``b``, both ways."""
        link = frozenset((a, b))
        if link in self._cuts:
            return
        table = f"{_PREFIX}{os.getpid()}_{next(_counter)}"
        _nft(f"""
            table ip {table} {{
                chain output {{
                    type filter hook output priority 0; policy accept;
                    ip saddr {a} ip daddr {b} drop
                    ip saddr {b} ip daddr {a} drop
                }}
            }}""")
        self._cuts[link] = table

    def heal(self, a: str, b: str) -> None:
        table = self._cuts.pop(frozenset((a, b)), None)
        if table is not None:
            _nft(f"delete table ip {table}")

    def heal_all(self) -> None:
        for a, b in [tuple(link) for link in self._cuts]:
            self.heal(a, b)

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cuts


def sources(pid: int, remote: str) -> set[str]:
    """The local addresses of process ``pid``'s established TCP connections to
    ``remote``: what a cut between those two addresses must match."""
    return {s.local[0] for s in tcp_sockets(pid) if s.established and s.remote[0] == remote}


def _nft(script: str) -> None:
    done = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"nft failed: {done.stderr.strip()}")


def _delete_orphans() -> None:
    """Delete the cuts of test processes that died before healing them."""
    listed = subprocess.run(["nft", "list", "tables", "ip"], text=True, capture_output=True,
                            check=True).stdout
    for table, pid in re.findall(rf"table ip ({_PREFIX}(\d+)_\d+)", listed):
        if not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["nft", "delete", "table", "ip", table], capture_output=True)
