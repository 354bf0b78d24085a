"""ZooKeeperServer: a standalone ZooKeeper (Debian's package) in a child process.

What ``gregor zookeeper start``, ``scripts/run-cluster.sh`` and the cluster tests
run: Kafka's own ``zookeeper-server-start.sh`` in spirit, with the server on one
loopback address, its data under a directory of ours, the admin web server off (it
would take port 8080) and the ``ruok`` four-letter word allowed.

ZooKeeper cannot bind port 0 together with ``clientPortAddress`` (it refuses the
configuration) nor report a port, so with no port given one is picked and, should
another process take it first, ZooKeeper exits with a BindException and the next
attempt picks another. Ready means both that *our* process listens on the port (a
``ruok`` alone could be answered by another server holding it) and that it answers
``ruok`` with ``imok``.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gregor.broker.process import free_port

# zookeeper.jar names its other dependencies in its manifest; slf4j-log4j12 is the
# binding without which ZooKeeper logs nothing at all (slf4j's no-op default), not even
# why it exited. Both jars come with the package's dependencies.
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CLASSPATH = ":".join([
    "/etc/zookeeper/conf", str(ZOOKEEPER_JAR),
    "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"])
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A small heap and the serial collector: ZooKeeper holds little here, and the machine's
# two cores are shared with the brokers and the tests.
JVM_OPTIONS = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.root.logger=INFO,CONSOLE"]
_POLL_S = 0.05
_BIND_ATTEMPTS = 5


class ZooKeeperServer:
    """One standalone ZooKeeper: start (and restart on the same port), stop, kill, pause.

    ``tick_ms`` is ZooKeeper's time unit: sessions time out in whole ticks, and by
    default no session may be shorter than two ticks, so tests with 2 s broker sessions
    want a small tick. ``force_sync=False`` skips the fsync of each write, which the
    tests (whose data does not outlive them) do not need on a loaded machine.
    """

    def __init__(self, data_dir: Path, port: int = 0, host: str = "127.0.0.1",
                 tick_ms: int = 200, min_session_timeout_ms: int | None = None,
                 max_session_timeout_ms: int = 60000, force_sync: bool = True,
                 log_path: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tick_ms = tick_ms
        self.min_session_timeout_ms = min_session_timeout_ms or 2 * tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.log_path = log_path or self.data_dir / "zookeeper.log"
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        """The connect string clients and ``zookeeper.connect`` use (add a chroot)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            f"forceSync={'yes' if self.force_sync else 'no'}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "maxClientCnxns=0",  # every broker and test connects from loopback
        ]) + "\n")
        return config

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start and wait until ready. A first start with port 0 picks the port (again
        if it was taken meanwhile); a restart asks for the same one, as its clients
        reconnect to it, and fails at once if another process holds it."""
        if not ZOOKEEPER_JAR.exists():
            raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: Debian's zookeeper package is "
                               "not installed (scripts/install-zookeeper.sh installs it)")
        requested = self.port
        for _ in range(1 if requested else _BIND_ATTEMPTS):
            self.port = requested or free_port()
            if self._start_once(timeout):
                return self
        taken, self.port = self.port, requested
        raise RuntimeError(f"ZooKeeper could not bind {self.host}:{taken} (address in use):\n"
                           f"{self.log_tail()}")

    def _start_once(self, timeout: float) -> bool:
        """Start and wait until ready; False if the port was taken."""
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["java", *JVM_OPTIONS, "-cp", CLASSPATH, MAIN_CLASS, str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # A session of its own: a Ctrl-C in the terminal reaches only whoever
            # started it, which stops it in order (brokers first, ZooKeeper last).
            start_new_session=True)
        log.close()
        log_start = self.log_path.stat().st_size
        deadline = time.monotonic() + timeout
        while not (self._listens() and self.is_ok()):
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                if "java.net.BindException" in self._log_since(log_start):
                    return False
                raise RuntimeError(f"ZooKeeper exited with {code}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ZooKeeper not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(_POLL_S)
        return True

    def _listens(self) -> bool:
        """Whether this server's own process listens on its port."""
        assert self.proc is not None
        return any(s.listening and s.local[1] == self.port for s in tcp_sockets(self.proc.pid))

    def is_ok(self) -> bool:
        """ZooKeeper's own readiness word: ``ruok`` answered by ``imok``."""
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; the exit status (143: the JVM's answer to SIGTERM)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def kill(self) -> None:
        """SIGKILL: ZooKeeper's log and snapshots are what it recovers from."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: sessions stop being answered and, once resumed, expire in bulk."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 60.0) -> ZooKeeperServer:
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class TcpSocket:
    """One of a process's TCP sockets, as /proc shows it."""

    local: tuple[str, int]
    remote: tuple[str, int]
    state: str  # /proc's hex code: "0A" listening, "01" established

    @property
    def listening(self) -> bool:
        return self.state == "0A"

    @property
    def established(self) -> bool:
        return self.state == "01"


def tcp_sockets(pid: int) -> list[TcpSocket]:
    """Process ``pid``'s TCP sockets: its socket inodes found among its network
    namespace's sockets (Java's are IPv6 sockets, IPv4-mapped, hence tcp6 too).
    Empty once the process is gone."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        found = []
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as sockets:
                for line in sockets.readlines()[1:]:
                    fields = line.split()
                    if fields[9] in inodes:
                        found.append(TcpSocket(_endpoint(fields[1]), _endpoint(fields[2]),
                                               fields[3]))
        return found
    except OSError:
        return []


def _endpoint(hex_endpoint: str) -> tuple[str, int]:
    """``0100007F:1F90`` (tcp) or 32 hex digits and a port (tcp6) to (host, port)."""
    hex_host, hex_port = hex_endpoint.split(":")
    host = bytes.fromhex(hex_host)
    # /proc prints each 32-bit word of the address in host (little-endian) order.
    packed = b"".join(host[i:i + 4][::-1] for i in range(0, len(host), 4))
    if len(packed) == 4:
        return socket.inet_ntop(socket.AF_INET, packed), int(hex_port, 16)
    address = ipaddress.IPv6Address(packed)
    return str(address.ipv4_mapped or address), int(hex_port, 16)
