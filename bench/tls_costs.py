"""What each step of a fetch answer costs a core, per GB, with and without TLS:
``python -m bench.tls_costs``.

A PLAINTEXT fetch answer leaves gregor by ``sendfile``; over TLS each byte is read into
memory, encrypted by OpenSSL in user space (the kernel here has no kernel TLS, and
Python 3.11 offers none) and written to the socket from there. Measured apart, the
sender alone on :data:`~bench.saturate.BROKER_CPU` and a reader draining a loopback
socket on :data:`~bench.saturate.CLIENT_CPU` (as ``bench.saturate`` places broker and
load), each the least CPU of :data:`ROUNDS` runs:

- ``sendfile``: a cached file to the socket, 2 MiB a call (a fetch's two partitions);
- ``pread``: the file into memory, :data:`PIECE` at a time;
- ``send``: the same bytes written to the socket from memory;
- ``encrypt``: ``SSLObject.write`` of a piece into its memory BIO and reading it out,
  as asyncio's TLS transport does, over a TLS 1.3 session (AES-256-GCM, what OpenSSL
  and Java servers choose first) and a TLS 1.2 one with AES-128-GCM (a Kafka user's
  ``ssl.cipher.suites`` choice).

``bench.security_bench`` adds up the TLS steps to the broker's measured PLAINTEXT cost
per GB (less its ``sendfile``): the fewest CPU seconds a TLS fetch could take, hence the
highest SASL_SSL/PLAINTEXT ratio a broker on this machine could reach, whatever the
Python around the steps.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from bench.saturate import BROKER_CPU, CLIENT_CPU

MIB = 1 << 20
PIECE = 256 * 1024  # what gregor encrypts at a time (gregor.broker.connection)
FETCH = 2 * MIB  # bench.saturate's fetch answer: two partitions of 1 MiB
FILE_BYTES = 8 * MIB
VOLUME = 512 * MIB  # per run
ROUNDS = 3
SEND_BUFFER = 102_400  # Kafka's socket.send.buffer.bytes, which gregor applies
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CIPHERS = {"AES-256-GCM (TLS 1.3)": None, "AES-128-GCM (TLS 1.2)": "ECDHE-RSA-AES128-GCM-SHA256"}


@contextmanager
def _drained_socket() -> Iterator[socket.socket]:
    """A loopback connection whose other end a child process on the client core reads
    and discards as fast as it can."""
    listening = socket.create_server(("127.0.0.1", 0))
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(listening.getsockname()[1]),
                               str(CLIENT_CPU)])
    sock, _ = listening.accept()
    listening.close()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    try:
        yield sock
    finally:
        sock.close()
        reader.wait(30)


_READER = """
import os, socket, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buffer = bytearray(1 << 20)
while sock.recv_into(buffer):
    pass
"""


def _sessions(certs: Path, ciphers: str | None) -> tuple[ssl.SSLObject, ssl.MemoryBIO]:
    """The server side of a TLS session made in memory, and its outgoing BIO."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / "broker.pem")
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(certs / "ca.pem")
    if ciphers:
        client.maximum_version = ssl.TLSVersion.TLSv1_2
        client.set_ciphers(ciphers)
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    ours = server.wrap_bio(pipes[0], pipes[1], server_side=True)
    theirs = client.wrap_bio(pipes[2], pipes[3], server_hostname="localhost")
    for _ in range(10):
        for end in (theirs, ours):
            with suppress(ssl.SSLWantReadError):
                end.do_handshake()
        if pipes[3].pending:
            pipes[0].write(pipes[3].read())
        if pipes[1].pending:
            pipes[2].write(pipes[1].read())
    return ours, pipes[1]


def measure(certs: Path) -> dict[str, float]:
    """CPU seconds per GB of each step (the least of :data:`ROUNDS` runs)."""
    with tempfile.TemporaryFile() as file:
        file.write(os.urandom(FILE_BYTES))
        file.flush()
        fd = file.fileno()
        os.pread(fd, FILE_BYTES, 0)  # cached, as the bench's records are

        def positions(size: int) -> range:
            return range(0, VOLUME, size)

        def sendfile() -> None:
            with _drained_socket() as sock:
                for at in positions(FETCH):
                    done = 0
                    while done < FETCH:
                        done += os.sendfile(sock.fileno(), fd, at % FILE_BYTES + done,
                                            FETCH - done)

        def pread() -> None:
            for at in positions(PIECE):
                os.pread(fd, PIECE, at % FILE_BYTES)

        def send() -> None:
            piece = os.pread(fd, PIECE, 0)
            with _drained_socket() as sock:
                for _ in positions(PIECE):
                    sock.sendall(piece)

        def encrypt(ciphers: str | None) -> Callable[[], None]:
            def run() -> None:
                session, outgoing = _sessions(certs, ciphers)
                piece = os.pread(fd, PIECE, 0)
                for _ in positions(PIECE):
                    session.write(piece)
                    outgoing.read()
            return run

        steps: dict[str, Callable[[], None]] = {
            "sendfile": sendfile, "pread": pread, "send": send,
            **{f"encrypt {name}": encrypt(ciphers) for name, ciphers in CIPHERS.items()}}
        best = dict.fromkeys(steps, float("inf"))
        affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {BROKER_CPU})
        try:
            for _ in range(ROUNDS):
                for name, step in steps.items():
                    started = time.process_time()
                    step()
                    best[name] = min(best[name], (time.process_time() - started)
                                     / (VOLUME / 1e9))
        finally:
            os.sched_setaffinity(0, affinity)
        return best


def kernel_tls() -> str:
    """Whether this machine offers kernel TLS, the only route by which a TLS answer could
    leave by ``sendfile``, and if not, what is missing (looked up, not assumed)."""
    try:
        ulps = Path("/proc/sys/net/ipv4/tcp_available_ulp").read_text().split()
    except OSError:
        ulps = []
    missing = []
    if "tls" not in ulps:
        missing.append("the kernel offers no `tls` upper layer (not in "
                       "`/proc/sys/net/ipv4/tcp_available_ulp`: built without `CONFIG_TLS`)")
    if not hasattr(ssl, "OP_ENABLE_KTLS"):
        missing.append(f"Python {sys.version_info.major}.{sys.version_info.minor} has no "
                       "`ssl.OP_ENABLE_KTLS` (3.12 adds it)")
    return "; ".join(missing) or "kernel TLS is available here"


def floor(costs: dict[str, float], plaintext_s_per_gb: float, cipher: str) -> float:
    """The fewest CPU seconds per GB a TLS fetch could take: the PLAINTEXT fetch's cost
    with its ``sendfile`` replaced by reading, encrypting (with ``cipher``) and sending."""
    return (plaintext_s_per_gb - costs["sendfile"] + costs["pread"] + costs["send"]
            + costs[f"encrypt {cipher}"])


def table(costs: dict[str, float]) -> str:
    rows = ["| step | CPU s per GB |", "|---|---|"]
    rows += [f"| {name} | {value:.3f} |" for name, value in costs.items()]
    return "\n".join(rows)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tls-costs-") as work:
        subprocess.run([str(SCRIPTS / "make-certs.sh"), work], check=True,
                       capture_output=True)
        print(table(measure(Path(work))))
        print(f"Kernel TLS: {kernel_tls()}.")


if __name__ == "__main__":
    main()
