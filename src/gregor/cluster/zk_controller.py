"""ZkController: the one broker that makes cluster-wide decisions, elected in ZooKeeper.

Election is Kafka's: one multi-op creates the ephemeral ``/controller`` node and
bumps ``/controller_epoch`` conditioned on its version. Every later write is
conditioned on that version too, so a controller that lost its session (paused,
cut off) and does not know it yet cannot change anything.

The controller is level-triggered: whenever the metadata it follows changes (a
broker came or went, a topic was created, a deletion or a controlled shutdown
was asked for), it reconciles the whole cluster against Kafka's rules in
``cluster.election``: partitions without a state get their first leader,
partitions whose leader is gone get a new one from the ISR (or stay offline),
dead followers leave the ISR, brokers shutting down hand over their leaderships,
deleted topics are removed. Each partition write is conditioned on the state's
version, so a leader's concurrent ISR change makes it fail and be decided again
on the newer state rather than overwritten. Elections an admin asks for
(ElectLeaders) are decided by the same rules and written the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection

from kazoo.exceptions import NodeExistsError

from gregor.cluster import election, znodes
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.zk_metadata import ZkMetadataCache
from gregor.cluster.zookeeper import Check, Create, SetData, TransactionFailed, ZooKeeperSession
from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# An ElectLeaders answer per partition: an error code and its message (None when none).
ElectionResult = tuple[ErrorCode, str | None]
UNKNOWN_PARTITION: ElectionResult = (ErrorCode.unknown_topic_or_partition,
                                     "The partition does not exist.")


class NotController(Exception):
    """This broker's controller epoch is no longer the current one."""


class ZkController:
    def __init__(self, config: BrokerConfig, zk: ZooKeeperSession, image: MetadataImage,
                 cache: ZkMetadataCache) -> None:
        self.config = config
        self.zk = zk
        self.image = image
        self.cache = cache
        self.broker_id = config.node_id
        self.epoch = -1
        self._epoch_version = -1
        self.shutting_down: set[int] = set()
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._rebalance_task: asyncio.Task | None = None
        # Leaderships this broker moved as controller, for metrics (Kafka's ControllerStats).
        self.leader_elections = 0
        self.unclean_leader_elections = 0

    @property
    def is_active(self) -> bool:
        return self._epoch_version >= 0

    # ------------------------------------------------------------------ election
    async def try_to_become_controller(self) -> None:
        """Run for controller if there is none; called at start and when it goes away."""
        if self.is_active or self.image.controller_id >= 0:
            return
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(znodes.CONTROLLER_EPOCH, b"0")
        found = await self.zk.get(znodes.CONTROLLER_EPOCH)
        assert found is not None
        epoch = int(found[0].decode()) + 1
        try:
            await self.zk.multi([
                Create(znodes.CONTROLLER, znodes.encode_controller(self.broker_id), ephemeral=True),
                SetData(znodes.CONTROLLER_EPOCH, str(epoch).encode(), found[1].version),
            ])
        except TransactionFailed:
            return  # another broker won; its /controller node tells the cache
        self.epoch, self._epoch_version = epoch, found[1].version + 1
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, epoch)
        await self.zk.ensure(znodes.CONTROLLED_SHUTDOWN)
        self._task = asyncio.create_task(self._run())
        if self.config["auto.leader.rebalance.enable"]:
            self._rebalance_task = asyncio.create_task(self._rebalance_periodically())
        self.changed()

    def resign(self) -> None:
        """Stop acting as controller (the session was lost, or a write was fenced)."""
        if not self.is_active:
            return
        log.warning("broker %d is no longer the controller (epoch %d)", self.broker_id,
                    self.epoch)
        self._epoch_version = -1
        for task in (self._task, self._rebalance_task):
            if task is not None:
                task.cancel()
        self._task = self._rebalance_task = None

    def changed(self) -> None:
        """The metadata changed: reconcile soon (changes arriving together coalesce)."""
        self._dirty.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._reconcile()
            except NotController:
                self.resign()
                return
            except Exception:
                log.exception("controller: reconciling the cluster failed; retrying")
                await asyncio.sleep(1)
                self._dirty.set()

    # --------------------------------------------------------------- reconcile
    async def _reconcile(self) -> None:
        await self._watch_shutdowns()
        await self._delete_requested_topics()
        live = await self._registered_brokers()
        eligible = live - self.shutting_down
        for topic in list(self.image.topics.values()):
            unclean = TopicConfig(self.config, topic.configs)["unclean.leader.election.enable"]
            for index, state in enumerate(topic.partitions):
                await self._reconcile_partition(topic, index, state, live, eligible, unclean)

    async def _registered_brokers(self) -> set[int]:
        """The brokers registered now, read from ZooKeeper rather than from the cache: a
        restarted follower registers before it fetches, so one its leader has just put
        back in the ISR is always among them, where the cache may not have seen the
        registration yet, and the follower would be dropped from the ISR as dead."""
        return {int(child) for child in await self.zk.children(znodes.BROKER_IDS) or []}

    async def _reconcile_partition(self, topic: TopicMetadata, index: int,
                                   state: PartitionState, live: set[int], eligible: set[int],
                                   unclean: bool) -> None:
        if state.partition_epoch < 0:
            await self._create_state(topic.name, index,
                                     election.initial_state(state.replicas, eligible, self.epoch))
            return
        decided = election.elect_offline(state, eligible, unclean_allowed=unclean,
                                         controller_epoch=self.epoch)
        if decided is None:
            for broker in self.shutting_down & set(state.isr):
                decided = election.elect_for_shutdown(state, eligible | {broker}, broker,
                                                      self.epoch)
                if decided is not None:
                    break
        if decided is not None:
            await self._write_election(topic.name, index, state, decided)
            return
        shrunk = election.without_replicas(state, set(state.replicas) - live, self.epoch)
        if shrunk is not None:
            await self._write_state(topic.name, index, state, shrunk)

    async def _create_state(self, topic: str, index: int, state: PartitionState) -> None:
        await self.zk.ensure(f"{znodes.partitions_path(topic)}/{index}")
        try:
            await self.zk.multi([
                Check(znodes.CONTROLLER_EPOCH, self._epoch_version),
                Create(znodes.partition_state_path(topic, index),
                       znodes.encode_partition_state(state)),
            ])
        except TransactionFailed as exc:
            self._check_fenced(exc)  # else it exists already: the cache is catching up
            return
        log.info("%s-%d: led by %d, ISR %s", topic, index, state.leader, list(state.isr))

    async def _write_election(self, topic: str, index: int, before: PartitionState,
                              decided: election.Election) -> bool:
        written = await self._write_state(topic, index, before, decided.state)
        if written and decided.unclean:
            self.unclean_leader_elections += 1
            log.warning("%s-%d: unclean leader election: broker %d was not in sync (ISR "
                        "%s) and now leads; records acknowledged by the ISR may be lost",
                        topic, index, decided.state.leader, list(before.isr))
        return written

    async def _write_state(self, topic: str, index: int, before: PartitionState,
                           after: PartitionState) -> bool:
        """Write a partition's new state; False if it changed meanwhile (decide again)."""
        try:
            await self.zk.multi([
                Check(znodes.CONTROLLER_EPOCH, self._epoch_version),
                SetData(znodes.partition_state_path(topic, index),
                        znodes.encode_partition_state(after), before.partition_epoch),
            ])
        except TransactionFailed as exc:
            # A leader changed the ISR meanwhile: decided again on the newer state.
            self._check_fenced(exc)
            return False
        self.leader_elections += after.leader != before.leader
        log.info("%s-%d: leader %d -> %d (epoch %d), ISR %s -> %s", topic, index, before.leader,
                 after.leader, after.leader_epoch, list(before.isr), list(after.isr))
        return True

    def _check_fenced(self, exc: TransactionFailed) -> None:
        if "Check /controller_epoch" in str(exc):
            raise NotController from exc

    # ------------------------------------------------------ elections asked for
    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_s: float) -> dict[tuple[str, int], ElectionResult]:
        """ElectLeaders: decide and write each partition's election (every partition when
        ``partitions`` is None), then wait until this broker's metadata shows the new
        leaders, so that a client describing the topic next sees them. A partition whose
        state changed meanwhile is decided again on the newer one, until ``timeout_s``."""
        if partitions is None:
            partitions = [(t.name, i) for t in self.image.topics.values()
                          for i in range(len(t.partitions))]
        if not self.is_active:
            return dict.fromkeys(partitions, (ErrorCode.not_controller,
                                              f"broker {self.broker_id} is not the controller"))
        deadline = time.monotonic() + timeout_s
        eligible = await self._registered_brokers() - self.shutting_down
        results: dict[tuple[str, int], ElectionResult] = {}
        leaders: dict[tuple[str, int], int] = {}
        pending = list(dict.fromkeys(partitions))
        while pending:
            changed = []
            for topic_name, index in pending:
                state = self.image.partition(topic_name, index)
                if state is None:
                    results[topic_name, index] = UNKNOWN_PARTITION
                    continue
                decided = election.elect_on_request(state, eligible, election_type,
                                                    self.epoch)
                if isinstance(decided, ErrorCode):
                    results[topic_name, index] = (decided, None)
                elif await self._write_election(topic_name, index, state, decided):
                    results[topic_name, index] = (ErrorCode.none, None)
                    leaders[topic_name, index] = decided.state.leader
                else:
                    changed.append((topic_name, index))
            pending = changed
            if pending:
                if time.monotonic() >= deadline:
                    results.update(dict.fromkeys(pending, (
                        ErrorCode.request_timed_out, "the partition kept changing")))
                    break
                await self.cache.wait_for_change(deadline - time.monotonic())
        await self.cache.wait_until(lambda: all(
            self.image.topics[t].partitions[i].leader == leader
            for (t, i), leader in leaders.items() if t in self.image.topics),
            deadline - time.monotonic())
        return results

    # ----------------------------------------------------- shutdowns, deletions
    async def _watch_shutdowns(self) -> None:
        children = await self.zk.children(znodes.CONTROLLED_SHUTDOWN, self.changed) or []
        requested = {int(c) for c in children}
        for broker in requested - self.shutting_down:
            log.info("controlled shutdown of broker %d: moving its leaderships", broker)
        self.shutting_down = requested

    async def _delete_requested_topics(self) -> None:
        for name in await self.zk.children(znodes.DELETE_TOPICS, self.changed) or []:
            stat = await self.zk.exists(znodes.CONTROLLER_EPOCH)
            if stat is None or stat.version != self._epoch_version:
                raise NotController
            if await self.zk.exists(znodes.topic_path(name)) is not None:
                await self.zk.delete(znodes.topic_path(name), recursive=True)
            if await self.zk.exists(znodes.topic_config_path(name)) is not None:
                await self.zk.delete(znodes.topic_config_path(name))
            await self.zk.delete(znodes.delete_topic_path(name))
            log.info("deleted topic %s", name)

    # ------------------------------------------------------- preferred leaders
    async def _rebalance_periodically(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            try:
                await self.rebalance_preferred_leaders()
            except NotController:
                self.resign()
                return
            except Exception:
                log.exception("controller: preferred leader election failed")

    async def rebalance_preferred_leaders(self) -> None:
        """Kafka's auto leader rebalance: give leadership back to preferred replicas on
        brokers where more than leader.imbalance.per.broker.percentage of them lead
        elsewhere."""
        eligible = set(self.image.brokers) - self.shutting_down
        threshold = self.config["leader.imbalance.per.broker.percentage"] / 100
        for broker in sorted(eligible):
            preferred = [(t, i, s) for t in self.image.topics.values()
                         for i, s in enumerate(t.partitions) if s.replicas[:1] == (broker,)]
            imbalanced = [(t, i, s) for t, i, s in preferred if s.leader != broker]
            if not preferred or len(imbalanced) / len(preferred) <= threshold:
                continue
            for topic, index, state in imbalanced:
                decided = election.elect_preferred(state, eligible, self.epoch)
                if decided is not None:
                    await self._write_election(topic.name, index, state, decided)


def leaderships_to_move(image: MetadataImage, broker_id: int) -> list[tuple[str, int]]:
    """Partitions a broker shutting down still leads or follows in sync while another
    live ISR member could take over: what a controlled shutdown waits for."""
    live: Collection[int] = image.brokers
    pending = []
    for topic in image.topics.values():
        for index, state in enumerate(topic.partitions):
            others = [r for r in state.isr if r != broker_id and r in live]
            if broker_id in state.isr and others:
                pending.append((topic.name, index))
    return pending
