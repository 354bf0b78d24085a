"""ZooKeeperSession: kazoo's ZooKeeper client, seen from the broker's asyncio loop.

kazoo runs its IO, callbacks and watches on threads of its own and has no asyncio
handler, so every call here is kazoo's ``*_async`` variant whose completion is
handed to the loop with ``call_soon_threadsafe``: the event loop never blocks on
ZooKeeper, and watches and session-state changes arrive as plain callbacks on it.

kazoo's ``*_async`` calls are not quite non-blocking, though: each wakes kazoo's
connection thread by writing a byte to a socket pair that the thread reads only while
connected. Without a connection (ZooKeeper gone, the thread in its reconnect backoff)
the pair fills after 278 calls and the next one blocks its caller, the event loop,
until ZooKeeper is back: at a thousand partitions the metadata cache and the
controller make that many at once, and the broker stopped serving and could not even
stop. So calls made without a connection, or beyond ``_MAX_IN_FLIGHT`` unanswered
ones, are held here (in order) and handed to kazoo once connected again, as kazoo
itself would have sent them; closing fails those still held.

A ``zookeeper.connect`` string may end with a chroot (``host:port/gregor``), as in
Kafka; the chroot is created when missing, as Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionClosedError, NodeExistsError, NoNodeError
from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import ZnodeStat

log = logging.getLogger(__name__)

_MAX_IN_FLIGHT = 128
"""Calls handed to kazoo and not yet answered: well below the 278 wake-up bytes its
socket pair holds (a call dropped with the connection stays in kazoo's queue)."""

Watch = Callable[[], None]


class ZooKeeperError(Exception):
    """A ZooKeeper operation failed; ``cause`` is kazoo's exception."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class TransactionFailed(ZooKeeperError):
    """A multi-op was refused as a whole: a check or a version did not match."""


@dataclass(frozen=True, slots=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes
    ephemeral: bool = False
    sequential: bool = False  # ZooKeeper appends a 10-digit counter to the name


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


Op = Check | Create | SetData | Delete


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` to ``("h1:2181,h2:2181", "/chroot")``."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


class ZooKeeperSession:
    def __init__(self, connect: str, session_timeout_ms: int,
                 on_state: Callable[[str], None] | None = None,
                 source_address: str | None = None) -> None:
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_s = session_timeout_ms / 1000
        self._on_state = on_state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._source_address = source_address
        self._client = self._new_client(self.hosts + self.chroot)
        self._client.add_listener(self._state_changed)
        self._held: collections.deque[tuple[Callable[[], Any], asyncio.Future]] = (
            collections.deque())
        self._in_flight = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self, timeout: float = 15.0) -> None:
        """Connect (creating the chroot first if it is missing)."""
        self._loop = asyncio.get_running_loop()
        if self.chroot:
            await asyncio.to_thread(self._ensure_chroot, timeout)
        await asyncio.to_thread(self._client.start, timeout)

    def _new_client(self, hosts: str) -> KazooClient:
        handler = (SequentialThreadingHandler() if self._source_address is None
                   else _SourceBoundHandler(self._source_address))
        return KazooClient(hosts=hosts, timeout=self.session_timeout_s, handler=handler)

    def _ensure_chroot(self, timeout: float) -> None:
        root = self._new_client(self.hosts)
        root.start(timeout)
        try:
            root.ensure_path(self.chroot)
        finally:
            root.stop()
            root.close()

    async def close(self) -> None:
        """End the session at once: its ephemeral nodes go with it. Calls still held
        fail with kazoo's ConnectionClosedError."""
        while self._held:
            _, future = self._held.popleft()
            _settle(future, None, ConnectionClosedError("the session was closed"))
        await asyncio.to_thread(self._stop_client)

    def _stop_client(self) -> None:
        self._client.stop()
        self._client.close()

    @property
    def session_id(self) -> int | None:
        session = self._client.client_id
        return session[0] if session else None

    @property
    def connected(self) -> bool:
        return self._client.state == KazooState.CONNECTED

    def _state_changed(self, state: str) -> None:
        # Called on kazoo's thread; the loop decides what a lost session means.
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._state_changed_on_loop, state)

    def _state_changed_on_loop(self, state: str) -> None:
        self._hand_over()
        if self._on_state is not None:
            self._on_state(state)

    # ---------------------------------------------------------------- operations
    def _await(self, start: Callable[[], Any]) -> asyncio.Future:
        """Run a kazoo ``*_async`` call and resolve a loop future with its outcome: now,
        or once connected with room in flight (see the module's docstring)."""
        future: asyncio.Future = (self._loop or asyncio.get_running_loop()).create_future()
        self._held.append((start, future))
        self._hand_over()
        return future

    def _hand_over(self) -> None:
        """Hand held calls to kazoo, in order, while it is connected and has room."""
        while self._held and self._in_flight < _MAX_IN_FLIGHT and self.connected:
            start, future = self._held.popleft()
            if not future.done():  # not given up on meanwhile (a timeout)
                self._submit(start, future)

    def _submit(self, start: Callable[[], Any], future: asyncio.Future) -> None:
        loop = future.get_loop()
        self._in_flight += 1

        def done(result: Any) -> None:
            try:
                value, error = result.get(block=False), None
            except Exception as exc:  # kazoo reports failures by raising from get()
                value, error = None, exc
            loop.call_soon_threadsafe(self._answered, future, value, error)

        start().rawlink(done)

    def _answered(self, future: asyncio.Future, value: Any, error: BaseException | None
                  ) -> None:
        self._in_flight -= 1
        _settle(future, value, error)
        self._hand_over()

    def _watcher(self, watch: Watch | None) -> Callable[[Any], None] | None:
        if watch is None:
            return None
        loop = self._loop or asyncio.get_running_loop()

        def fired(_event: Any) -> None:
            loop.call_soon_threadsafe(watch)
        return fired

    async def get(self, path: str, watch: Watch | None = None
                  ) -> tuple[bytes, ZnodeStat] | None:
        """The node's data and stat, or None if it does not exist (the watch is then an
        existence watch: it fires when the node is created)."""
        try:
            return await self._await(lambda: self._client.get_async(path, self._watcher(watch)))
        except NoNodeError:
            if watch is not None and await self.exists(path, watch):
                return await self.get(path, watch)
            return None

    async def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return await self._await(lambda: self._client.exists_async(path, self._watcher(watch)))

    async def versions(self, paths: Sequence[str]) -> list[int]:
        """Each node's version (-1 for one that does not exist), asked together: kazoo
        pipelines them, so a batch costs about one round trip."""
        stats = await asyncio.gather(*(self.exists(path) for path in paths))
        return [-1 if stat is None else stat.version for stat in stats]

    async def children(self, path: str, watch: Watch | None = None) -> list[str] | None:
        """The node's children, or None if it does not exist."""
        try:
            return await self._await(
                lambda: self._client.get_children_async(path, self._watcher(watch)))
        except NoNodeError:
            if watch is not None:
                await self.exists(path, watch)
            return None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     makepath: bool = False, sequence: bool = False) -> str:
        """Create a node (``sequence``: with ZooKeeper's counter appended to its name);
        return its path; raises kazoo's NodeExistsError if it is there."""
        return await self._await(lambda: self._client.create_async(
            path, data, ephemeral=ephemeral, makepath=makepath, sequence=sequence))

    async def ensure(self, path: str) -> None:
        """Create ``path`` and its parents as empty nodes where missing."""
        with contextlib.suppress(NodeExistsError):
            await self.create(path, makepath=True)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return await self._await(lambda: self._client.set_async(path, data, version))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            await asyncio.to_thread(self._client.delete, path, version, True)
            return
        await self._await(lambda: self._client.delete_async(path, version))

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        """Apply ``ops`` atomically; raise TransactionFailed if any was refused.

        kazoo's commit does not raise for a refused transaction: it returns one
        exception per op, which is turned into one error here.
        """
        transaction = self._client.transaction()
        for op in ops:
            if isinstance(op, Check):
                transaction.check(op.path, op.version)
            elif isinstance(op, Create):
                transaction.create(op.path, op.data, ephemeral=op.ephemeral,
                                   sequence=op.sequential)
            elif isinstance(op, SetData):
                transaction.set_data(op.path, op.data, op.version)
            else:
                transaction.delete(op.path, op.version)
        results = await self._await(transaction.commit_async)
        failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        # ZooKeeper marks the ops after the failing one as rolled back: name the cause.
        causes = [(i, r) for i, r in failures
                  if type(r).__name__ not in ("RolledBackError", "RuntimeInconsistency")]
        if failures:
            index, cause = (causes or failures)[0]
            op = ops[index]
            raise TransactionFailed(f"{type(op).__name__} {op.path}: {type(cause).__name__}",
                                    cause)
        return results


def _settle(future: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class _SourceBoundHandler(SequentialThreadingHandler):
    """kazoo's threading handler, with its connections made from ``source_address``
    (kazoo has no option for it: it calls ``create_connection`` on the module given)."""

    def __init__(self, source_address: str) -> None:
        super().__init__()
        self._socket_module = _SourceBoundSocketModule(source_address)

    def create_connection(self, *args: Any, **kwargs: Any) -> socket.socket:
        return kazoo_utils.create_tcp_connection(self._socket_module, *args, **kwargs)


class _SourceBoundSocketModule:
    """The ``socket`` module, but for ``create_connection``'s source address."""

    def __init__(self, source_address: str) -> None:
        self._source = (source_address, 0)

    def create_connection(self, address: tuple[str, int], timeout: float | None = None
                          ) -> socket.socket:
        return socket.create_connection(address, timeout, source_address=self._source)

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

