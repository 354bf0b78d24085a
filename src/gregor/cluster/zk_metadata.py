"""ZkMetadataCache: each broker's copy of the cluster metadata, kept from ZooKeeper watches.

Every broker (the controller too) watches the live brokers, those in a controlled
shutdown, the controller, the topics, each topic's configs and the partition state
change nodes, and applies what it reads to its ``MetadataImage``. Partition states
are read one by one only when the broker (re)starts its session; afterwards every
write of states comes with a change node holding them (``znodes``), so a batch of
thousands costs each broker a read or two, not a watch and a read per partition.
States are applied in the order of their partition epochs (the state znode's
version), so a late one never undoes a newer one; the broker's replicas then follow
the leader and epoch it names.

ZooKeeper watches fire once; each handler re-reads the node and sets the watch
again in the same call, so nothing between two reads is missed. Reads of one
path are serialized, so their results arrive in the order they were taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from kazoo.exceptions import KazooException

from gregor.cluster import znodes
from gregor.cluster.log_dir_events import read_offline_replicas
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import NO_LEADER, PartitionState, Reassignment
from gregor.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass
class MetadataListeners:
    """What a broker does when the metadata it follows changes. Each is called on
    the event loop after the image already shows the change."""

    partition_changed: Callable[[TopicMetadata, int, PartitionState], None] = (
        lambda topic, index, state: None)
    topic_created: Callable[[TopicMetadata], None] = lambda topic: None
    topic_deleted: Callable[[TopicMetadata], None] = lambda topic: None
    topic_config_changed: Callable[[TopicMetadata], None] = lambda topic: None
    broker_configs_changed: Callable[[MetadataImage], None] = lambda image: None
    brokers_changed: Callable[[set[int], set[int]], None] = lambda gone, joined: None
    shutdowns_changed: Callable[[], None] = lambda: None
    controller_changed: Callable[[int], None] = lambda controller_id: None


# How often a wait_until condition is asked again while the image keeps changing.
_RECHECK_S = 0.02
# Partition states applied between two turns of the event loop.
_APPLY_SLICE = 50
# The serialization key of every refresh of the dynamic broker configs.
_BROKER_CONFIGS_KEY = "broker-configs"


class ZkMetadataCache:
    def __init__(self, zk: ZooKeeperSession, image: MetadataImage,
                 listeners: MetadataListeners | None = None) -> None:
        self.zk = zk
        self.image = image
        self.listeners = listeners or MetadataListeners()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()
        # Change nodes applied (their names), and changes whose topic or partition was
        # not read yet when they came.
        self._seen_changes: set[str] = set()
        self._early_changes: dict[tuple[str, int], znodes.StateChange] = {}
        self._changed = asyncio.Event()

    async def start(self) -> None:
        """Read everything (arming every watch): before the broker serves, and again in
        a new session, whose watches the old one's do not carry over to."""
        self._seen_changes.clear()
        await self._refresh_brokers()
        await self._refresh_shutdowns()
        await self._refresh_controller()
        await self._refresh_offline_replicas()
        await self._refresh_broker_configs(every_entity=True)
        await self._refresh_topics(every_topic=True)
        await self._serialized("changes", self._refresh_changes)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def wait_for_change(self, timeout: float) -> None:
        """Park until the image changes or ``timeout`` seconds pass."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def wait_until(self, shown: Callable[[], bool], timeout: float) -> bool:
        """Park until ``shown()`` holds (asked now and after changes of the image) or
        ``timeout`` seconds pass; whether it holds.

        ``shown`` may walk every partition (a controlled shutdown's leaderships, a new
        topic's leaders), and a controller's batch changes thousands of states one
        read at a time: it is asked at most every ``_RECHECK_S``, not after each.
        """
        deadline = time.monotonic() + timeout
        while not shown():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.wait_for_change(remaining)
            await asyncio.sleep(min(_RECHECK_S, max(0.0, deadline - time.monotonic())))
        return True

    # ------------------------------------------------------------------ plumbing
    def _spawn(self, key: str, refresh: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """A watch callback that re-reads ``key`` (serialized per key) on the loop."""
        def fire() -> None:
            task = asyncio.get_running_loop().create_task(self._serialized(key, refresh))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return fire

    async def _serialized(self, key: str, refresh: Callable[[], Awaitable[None]]) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            try:
                await refresh()
            except KazooException as exc:
                # The session may be gone; the reload after reconnecting reads it again.
                log.warning("reading %s from ZooKeeper failed: %r", key, exc)
        self._changed.set()

    # ------------------------------------------------------------------- brokers
    async def _refresh_brokers(self) -> None:
        ids = await self.zk.children(
            znodes.BROKER_IDS, self._spawn("brokers", self._refresh_brokers)) or []
        brokers = {}
        for name in ids:
            broker_id = int(name)
            known = self.image.brokers.get(broker_id)
            found = await self.zk.get(znodes.broker_path(broker_id))
            if found is None:
                continue
            data, stat = found
            if known is not None and known.epoch == stat.czxid:
                brokers[broker_id] = known
            else:
                brokers[broker_id] = znodes.BrokerRegistration.decode(broker_id, data, stat.czxid)
        before = self.image.brokers
        self.image.brokers = brokers
        # A broker that re-registered (new epoch) counts as gone and back: its old
        # replicas' state must not be trusted (KIP-903).
        gone = {b for b in before if b not in brokers or brokers[b].epoch != before[b].epoch}
        joined = {b for b in brokers if b not in before or b in gone}
        if gone or joined:
            log.info("live brokers now %s (gone %s, joined %s)", sorted(brokers),
                     sorted(gone), sorted(joined))
            self.listeners.brokers_changed(gone, joined)

    async def _refresh_shutdowns(self) -> None:
        children = await self.zk.children(
            znodes.CONTROLLED_SHUTDOWN, self._spawn("shutdowns", self._refresh_shutdowns)) or []
        shutting_down = frozenset(int(child) for child in children)
        if shutting_down != self.image.shutting_down:
            self.image.shutting_down = shutting_down
            self.listeners.shutdowns_changed()

    async def _refresh_controller(self) -> None:
        found = await self.zk.get(znodes.CONTROLLER,
                                  self._spawn("controller", self._refresh_controller))
        controller_id = znodes.decode_controller(found[0]) if found else -1
        if controller_id != self.image.controller_id:
            self.image.controller_id = controller_id
            self.listeners.controller_changed(controller_id)

    async def _refresh_offline_replicas(self) -> None:
        """Replicas on live brokers' failed log directories (``log_dir_events``)."""
        self.image.offline_replicas = await read_offline_replicas(
            self.zk, self._spawn("offline-replicas", self._refresh_offline_replicas))

    # ---------------------------------------------------- dynamic broker configs
    async def _refresh_broker_configs(self, every_entity: bool = False) -> None:
        """The cluster's default and each broker's dynamic configs: new entities read
        here, changes to each by a watch of its own. Every refresh of them runs under
        one key, and merges into the image only after its reads, so that none writes
        back what another read meanwhile."""
        entities = set(await self.zk.children(znodes.BROKER_CONFIGS, self._spawn(
            _BROKER_CONFIGS_KEY, self._refresh_broker_configs)) or [])
        wanted = entities if every_entity else entities - set(self.image.broker_configs)
        read = {entity: await self._read_broker_config(entity) for entity in sorted(wanted)}
        current = self.image.broker_configs
        self._set_broker_configs({entity: read[entity] if entity in read
                                  else current.get(entity, {}) for entity in entities})

    async def _read_broker_config(self, entity: str) -> dict[str, str]:
        found = await self.zk.get(znodes.broker_config_path(entity), self._spawn(
            _BROKER_CONFIGS_KEY, lambda: self._refresh_broker_config(entity)))
        return znodes.decode_topic_config(found[0]) if found else {}

    async def _refresh_broker_config(self, entity: str) -> None:
        configs = await self._read_broker_config(entity)
        self._set_broker_configs({**self.image.broker_configs, entity: configs})

    def _set_broker_configs(self, configs: dict[str, dict[str, str]]) -> None:
        if configs != self.image.broker_configs:
            self.image.broker_configs = configs
            log.info("dynamic broker configs now %s", configs)
            self.listeners.broker_configs_changed(self.image)

    # -------------------------------------------------------------------- topics
    async def _refresh_topics(self, every_topic: bool = False) -> None:
        names = set(await self.zk.children(
            znodes.TOPICS, self._spawn("topics", self._refresh_topics)) or [])
        for name in sorted(set(self.image.topics) - names):
            topic = self.image.topics.pop(name)
            self._set_reassigning(name, {})
            self._early_changes = {tp: change for tp, change in self._early_changes.items()
                                   if tp[0] != name}
            log.info("topic %s deleted", name)
            self.listeners.topic_deleted(topic)
        for name in sorted(names if every_topic else names - set(self.image.topics)):
            await self._serialized(f"topic/{name}", functools.partial(
                self._refresh_topic, name, read_states=every_topic))

    async def _refresh_topic(self, name: str, read_states: bool = False) -> None:
        """The topic's assignment (and configs, when new). Its partitions' states are
        read here only in a (re)start; afterwards they come from change nodes, where
        any that came before the topic itself was read wait for it."""
        found = await self.zk.get(znodes.topic_path(name),
                                  self._spawn(f"topic/{name}", lambda: self._refresh_topic(name)))
        if found is None:
            return
        assignment = znodes.TopicAssignment.decode(found[0])
        topic = self.image.topics.get(name)
        if topic is None:
            configs = await self._read_config(name)
            topic = TopicMetadata(name=name, topic_id=assignment.topic_id, partitions=[],
                                  configs=configs, internal=name in INTERNAL_TOPICS)
            self.image.topics[name] = topic
            created = True
        else:
            created = len(assignment.replicas) > len(topic.partitions)
        self._set_reassigning(name, assignment.reassigning)
        for index, replicas in enumerate(assignment.replicas):
            if index < len(topic.partitions):
                self._set_replicas(topic, index, replicas)
                continue
            # Not led by anyone until the controller writes its first state.
            topic.partitions.append(PartitionState(leader=NO_LEADER, leader_epoch=-1, isr=(),
                                                   replicas=replicas, partition_epoch=-1))
        if created:
            self.listeners.topic_created(topic)
        for key in [key for key in self._early_changes if key[0] == name]:
            self._apply_change(self._early_changes.pop(key))
        if read_states:
            # Read together: ZooKeeper answers pipelined reads in one stream.
            await asyncio.gather(*(self._read_partition(name, index)
                                   for index in range(len(topic.partitions))))

    def _set_replicas(self, topic: TopicMetadata, index: int, replicas: tuple[int, ...]) -> None:
        """A partition's replica set changed (a reassignment): its state carries the new
        one, so brokers added start to follow and brokers removed stop."""
        current = topic.partitions[index]
        if current.replicas != replicas:
            log.info("%s-%d: replicas %s -> %s", topic.name, index, list(current.replicas),
                     list(replicas))
            topic.partitions[index] = replace(current, replicas=replicas)
            self.listeners.partition_changed(topic, index, topic.partitions[index])

    def _set_reassigning(self, name: str, reassigning: dict[int, Reassignment]) -> None:
        ongoing = self.image.reassigning
        for key in [key for key in ongoing if key[0] == name]:
            if key[1] not in reassigning:
                del ongoing[key]
        for index, reassignment in reassigning.items():
            ongoing[name, index] = reassignment

    async def _read_config(self, name: str) -> dict[str, str]:
        found = await self.zk.get(znodes.topic_config_path(name),
                                  self._spawn(f"config/{name}", lambda: self._refresh_config(name)))
        return znodes.decode_topic_config(found[0]) if found else {}

    async def _refresh_config(self, name: str) -> None:
        configs = await self._read_config(name)
        topic = self.image.topics.get(name)
        if topic is not None and configs != topic.configs:
            topic.configs = configs
            self.listeners.topic_config_changed(topic)

    async def _read_partition(self, name: str, index: int) -> None:
        found = await self.zk.get(znodes.partition_state_path(name, index))
        topic = self.image.topics.get(name)
        if found is None or topic is None or index >= len(topic.partitions):
            return
        data, stat = found
        self._apply(topic, index, znodes.decode_partition_state(
            data, topic.partitions[index].replicas, stat.version))

    def _apply(self, topic: TopicMetadata, index: int, state: PartitionState) -> None:
        """Take ``state`` unless this image has it or a newer one (partition epoch)."""
        current = topic.partitions[index]
        if current.partition_epoch >= state.partition_epoch and current.leader_epoch >= 0:
            return
        topic.partitions[index] = state
        self.listeners.partition_changed(topic, index, state)

    # ------------------------------------------------------------ state changes
    async def _refresh_changes(self) -> None:
        """Apply the states of every change node not applied yet, oldest first."""
        names = await self.zk.children(
            znodes.STATE_CHANGES, self._spawn("changes", self._refresh_changes)) or []
        new = sorted(set(names) - self._seen_changes)
        found = await asyncio.gather(*(self.zk.get(f"{znodes.STATE_CHANGES}/{name}")
                                       for name in new))
        self._seen_changes = (self._seen_changes & set(names)) | set(new)
        applied = 0
        for data in found:
            if data is not None:
                changes = znodes.decode_state_changes(data[0], self._replicas)
                await self._apply_changes(changes)
                applied += len(changes)
        if applied:
            # One line, not one a partition (those are at DEBUG): a controller's batch
            # may hold thousands.
            log.info("applied %d partition state(s) from %d change node(s)", applied, len(new))

    async def apply_written(self, changes: list[znodes.StateChange], node: str) -> None:
        """States this broker (the controller) has just written with the change node
        ``node``: applied now rather than when the node is read back (thousands of
        states a batch, behind the controller's other work), so that its own metadata
        answers, which clients and brokers waiting for a controlled shutdown read, show
        them at once; and the node is not read back at all."""
        self._seen_changes.add(node.rsplit("/", 1)[-1])
        await self._apply_changes(changes)
        self._changed.set()

    async def _apply_changes(self, changes: list[znodes.StateChange]) -> None:
        """Apply ``changes``, letting the event loop serve others every
        ``_APPLY_SLICE``: a new partition opens its log here, a few milliseconds on a
        busy disk, and 10,000 of them at once held the loop for half a minute, longer
        than replica.lag.time.max.ms, so that this broker's followers, unserved, fell
        out of every ISR it leads."""
        for done, change in enumerate(changes, start=1):
            self._apply_change(change)
            if done % _APPLY_SLICE == 0:
                await asyncio.sleep(0)

    def _replicas(self, name: str, index: int) -> tuple[int, ...]:
        topic = self.image.topics.get(name)
        return topic.partitions[index].replicas if (
            topic is not None and index < len(topic.partitions)) else ()

    def _apply_change(self, change: znodes.StateChange) -> None:
        topic = self.image.topics.get(change.topic)
        if (topic is None or topic.topic_id != change.topic_id
                or change.index >= len(topic.partitions)):
            # Its topic (or partition) is not read yet: applied once it is.
            key = (change.topic, change.index)
            held = self._early_changes.get(key)
            if held is None or held.state.partition_epoch < change.state.partition_epoch:
                self._early_changes[key] = change
            return
        replicas = topic.partitions[change.index].replicas
        state = change.state
        if state.replicas != replicas:  # read before a reassignment's replica change
            state = replace(state, replicas=replicas)
        self._apply(topic, change.index, state)
