"""Log directory failures told to the controller (KIP-112), in Kafka's ZooKeeper layout.

A broker whose log directory failed writes a persistent sequential node
``/log_dir_event_notification/log_dir_event_<10 digits>`` holding
``{"version":1,"broker":N,"event":1}`` (1: LogDirFailure), as Kafka's
``propagateLogDirEvent`` does. Kafka's controller then learns *which* replicas are
offline from the broker's answers to the LeaderAndIsr requests it sends; gregor's
brokers follow partition states from ZooKeeper instead of LeaderAndIsr, so the node
also names them (``offline_partitions``: topic to partition indexes) and the broker's
epoch (its registration's czxid, KIP-380): a restarted broker has a newer one, and
what its earlier incarnation lost says nothing about it. Kafka's controller ignores the
extra fields.

The controller reads and deletes the nodes, and from then on treats those replicas as
it treats replicas of a dead broker (Kafka's OfflineReplica): out of the ISR, never
elected, leadership moved to another ISR member.

The event nodes are consumed; what stays is an ephemeral node per broker,
``/offline_replicas/<id>``, in the same JSON, naming every replica offline there now
(it goes with the broker's session, as its replicas do). Every broker follows these
nodes into its metadata image: its Metadata answers list those replicas in
``offline_replicas`` (Kafka's controller sends them in UpdateMetadata), and a newly
elected controller knows them at once, where Kafka's learns them from the brokers'
LeaderAndIsr answers (KAFKA_STORAGE_ERROR per partition).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Collection, Coroutine, Iterable
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from gregor.cluster import znodes
from gregor.cluster.metadata_image import MetadataImage
from gregor.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = f"{LOG_DIR_EVENTS}/log_dir_event_"
LOG_DIR_FAILURE = 1

TopicPartition = tuple[str, int]


def encode_event(broker_id: int, broker_epoch: int, offline: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in offline:
        by_topic.setdefault(topic, []).append(index)
    return json.dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE,
                       "broker_epoch": broker_epoch, "offline_partitions": by_topic},
                      separators=(",", ":")).encode()


def decode_event(data: bytes) -> tuple[int, int, dict[str, list[int]]] | None:
    """(broker, broker epoch, topic -> partition indexes) of an event or offline-replicas
    node; None, logged, for a malformed one."""
    try:
        event: dict[str, Any] = json.loads(data.decode())
        offline = {str(topic): [int(i) for i in indexes]
                   for topic, indexes in event.get("offline_partitions", {}).items()}
        return int(event["broker"]), int(event.get("broker_epoch", -1)), offline
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring a malformed log directory event: %s", exc)
        return None


def offline_replicas_path(broker_id: int) -> str:
    return f"{znodes.OFFLINE_REPLICAS}/{broker_id}"


async def read_offline_replicas(zk: ZooKeeperSession, watch: Callable[[], None]
                                ) -> dict[str, dict[int, frozenset[int]]]:
    """Every live broker's offline replicas (topic -> index -> brokers), watching the
    nodes and their list for changes."""
    by_partition: dict[str, dict[int, set[int]]] = {}
    for name in await zk.children(znodes.OFFLINE_REPLICAS, watch) or []:
        found = await zk.get(f"{znodes.OFFLINE_REPLICAS}/{name}", watch)
        decoded = None if found is None else decode_event(found[0])
        if decoded is None:
            continue
        broker, _, offline = decoded
        for topic, indexes in offline.items():
            for index in indexes:
                by_partition.setdefault(topic, {}).setdefault(index, set()).add(broker)
    return {topic: {index: frozenset(brokers) for index, brokers in indexes.items()}
            for topic, indexes in by_partition.items()}


class LogDirFailureNotifier:
    """A broker's side: writes an event node for the partitions offline here, once the
    broker is registered (the event names its registration)."""

    def __init__(self, zk: ZooKeeperSession, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._registered = False
        self._pending: list[TopicPartition] | None = None
        self._tasks: set[asyncio.Task] = set()
        self._offline_now: Collection[TopicPartition] = ()
        self._node_due = False

    def offline_changed(self, offline: Collection[TopicPartition]) -> None:
        """The replicas offline here changed (``offline`` is read when the node is
        written): the ephemeral node follows, once per turn of the loop however many
        partitions changed."""
        self._offline_now = offline
        if self._registered and not self._node_due:
            self._node_due = True
            asyncio.get_running_loop().call_soon(self._spawn, self._write_node)

    def report(self, offline: list[TopicPartition]) -> None:
        self._pending = offline
        if self._registered:
            self._flush()

    def registered(self) -> None:
        self._registered = True
        if self._pending is not None:
            self._flush()
        if self._offline_now:
            self.offline_changed(self._offline_now)

    def _flush(self) -> None:
        offline, self._pending = self._pending, None
        assert offline is not None
        self._spawn(lambda: self._write(offline))

    def _spawn(self, write: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_node(self) -> None:
        self._node_due = False
        path = offline_replicas_path(self.broker_id)
        try:
            if not self._offline_now:
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(path)
                return
            stat = await self.zk.exists(f"{znodes.BROKER_IDS}/{self.broker_id}")
            data = encode_event(self.broker_id, -1 if stat is None else stat.czxid,
                                sorted(self._offline_now))
            try:
                await self.zk.create(path, data, ephemeral=True)
            except NodeExistsError:
                await self.zk.set(path, data)
        except Exception:
            log.exception("could not write this broker's offline replicas to %s", path)

    async def _write(self, offline: list[TopicPartition]) -> None:
        try:
            stat = await self.zk.exists(f"{znodes.BROKER_IDS}/{self.broker_id}")
            epoch = -1 if stat is None else stat.czxid
            await self.zk.ensure(LOG_DIR_EVENTS)
            path = await self.zk.create(LOG_DIR_EVENT_PREFIX,
                                        encode_event(self.broker_id, epoch, offline),
                                        sequence=True)
            log.warning("told the controller of %d offline partition(s) (%s)", len(offline),
                        path)
        except Exception:
            log.exception("could not tell the controller of offline partitions; will "
                          "again at the next state naming one")


class LogDirEvents:
    """The controller's side: which replicas are offline on live brokers."""

    def __init__(self, zk: ZooKeeperSession, image: MetadataImage,
                 changed: Callable[[], None]) -> None:
        self.zk = zk
        self.image = image
        self._changed = changed
        # (broker, its epoch when the event was written) per offline replica.
        self._offline: dict[TopicPartition, dict[int, int]] = {}

    async def collect(self) -> None:
        """Read and delete the event nodes (watching for more)."""
        names = await self.zk.children(LOG_DIR_EVENTS, lambda *_: self._changed()) or []
        for name in sorted(names):
            path = f"{LOG_DIR_EVENTS}/{name}"
            found = await self.zk.get(path)
            if found is not None:
                self._apply(found[0])
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(path)

    def _apply(self, data: bytes) -> None:
        decoded = decode_event(data)
        if decoded is None:
            return
        broker, epoch, offline = decoded
        count = 0
        for topic, indexes in offline.items():
            for index in indexes:
                self._offline.setdefault((topic, index), {})[broker] = epoch
                count += 1
        log.warning("broker %d lost a log directory: %d replica(s) offline there", broker,
                    count)

    def offline_brokers(self, topic: str, index: int) -> set[int]:
        """The brokers whose replica of the partition is offline (an incarnation of
        theirs registered since does not count): from the events read, and from the
        brokers' offline-replicas nodes, which a controller elected after the events
        were consumed knows only from."""
        known = self.image.offline_replicas.get(topic)
        now = known.get(index, frozenset()) if known else frozenset()
        found = self._offline.get((topic, index))
        if not found:
            return set(now)
        current = {broker for broker, epoch in found.items()
                   if (reg := self.image.brokers.get(broker)) is not None
                   and epoch in (-1, reg.epoch)}
        if len(current) < len(found):
            if current:
                self._offline[topic, index] = {b: found[b] for b in current}
            else:
                del self._offline[topic, index]
        return current | now
