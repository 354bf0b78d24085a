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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import NoNodeError

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


class LogDirFailureNotifier:
    """A broker's side: writes an event node for the partitions offline here, once the
    broker is registered (the event names its registration)."""

    def __init__(self, zk: ZooKeeperSession, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._registered = False
        self._pending: list[TopicPartition] | None = None
        self._tasks: set[asyncio.Task] = set()

    def report(self, offline: list[TopicPartition]) -> None:
        self._pending = offline
        if self._registered:
            self._flush()

    def registered(self) -> None:
        self._registered = True
        if self._pending is not None:
            self._flush()

    def _flush(self) -> None:
        offline, self._pending = self._pending, None
        assert offline is not None
        task = asyncio.get_running_loop().create_task(self._write(offline))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        try:
            event: dict[str, Any] = json.loads(data.decode())
            broker, epoch = int(event["broker"]), int(event.get("broker_epoch", -1))
            offline = event.get("offline_partitions", {})
            count = 0
            for topic, indexes in offline.items():
                for index in indexes:
                    self._offline.setdefault((topic, int(index)), {})[broker] = epoch
                    count += 1
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring a malformed log directory event: %s", exc)
            return
        log.warning("broker %d lost a log directory: %d replica(s) offline there", broker,
                    count)

    def offline_brokers(self, topic: str, index: int) -> set[int]:
        """The brokers whose replica of the partition is offline (an incarnation of
        theirs registered since does not count)."""
        found = self._offline.get((topic, index))
        if not found:
            return set()
        current = {broker for broker, epoch in found.items()
                   if (reg := self.image.brokers.get(broker)) is not None
                   and epoch in (-1, reg.epoch)}
        if len(current) < len(found):
            if current:
                self._offline[topic, index] = {b: found[b] for b in current}
            else:
                del self._offline[topic, index]
        return current
