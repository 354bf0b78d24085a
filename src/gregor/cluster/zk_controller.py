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
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError

from gregor.cluster import election, znodes
from gregor.cluster.log_dir_events import LogDirEvents
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.reassignment import Reassignments
from gregor.cluster.zk_metadata import ZkMetadataCache
from gregor.cluster.zookeeper import (
    Check,
    Create,
    Op,
    SetData,
    TransactionFailed,
    ZooKeeperSession,
)
from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# An ElectLeaders answer per partition: an error code and its message (None when none).
ElectionResult = tuple[ErrorCode, str | None]
UNKNOWN_PARTITION: ElectionResult = (ErrorCode.unknown_topic_or_partition,
                                     "The partition does not exist.")


# How long a change node is kept once the controller has seen it: far beyond any
# session timeout, so that a broker still in its session has read it.
_CHANGE_RETENTION_S = 120.0
# How often the controller looks for change nodes to delete.
_PRUNE_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class _Change:
    """A partition's new state, decided on ``before`` (written only if it is current)."""

    topic: str
    index: int
    before: PartitionState
    after: PartitionState
    unclean: bool = False


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
        # Change nodes, and when this controller first saw each (monotonic seconds).
        self._changes_seen: dict[str, float] = {}
        self._dirty = asyncio.Event()
        # What the next reconcile decides: every partition, or those that changed.
        self._everything_dirty = True
        self._dirty_partitions: set[tuple[str, int]] = set()
        self._next_prune = 0.0
        self._task: asyncio.Task | None = None
        self._rebalance_task: asyncio.Task | None = None
        # Leaderships this broker moved as controller, for metrics (Kafka's ControllerStats).
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        # Partition reassignments (KIP-455), carried on in each pass.
        self.reassignments = Reassignments(self, self._write_states)
        # Replicas offline on live brokers whose log directory failed (KIP-112).
        self.log_dir_events = LogDirEvents(zk, image, self.changed)

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
        """Brokers, shutdowns or topics changed: reconcile every partition soon (changes
        arriving together coalesce)."""
        self._everything_dirty = True
        self._dirty.set()

    def partition_changed(self, topic: str, index: int) -> None:
        """A partition's state changed (a leader's ISR change, a write of ours coming
        back, one that refused ours): decide that partition again, alone. At 10,000
        partitions a pass over all of them per change, with a leader's crowd of ISR
        changes arriving one node at a time, kept the controller from anything else."""
        self._dirty_partitions.add((topic, index))
        self._dirty.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            everything, partitions = self._everything_dirty, self._dirty_partitions
            self._everything_dirty, self._dirty_partitions = False, set()
            try:
                await self._reconcile(everything, partitions)
            except NotController:
                self.resign()
                return
            except Exception:
                log.exception("controller: reconciling the cluster failed; retrying")
                await asyncio.sleep(1)
                self.changed()

    # --------------------------------------------------------------- reconcile
    async def _reconcile(self, everything: bool, partitions: set[tuple[str, int]]) -> None:
        """Decide every partition (``everything``) or those of ``partitions``, and write
        what changed."""
        if everything:
            await self._watch_shutdowns()
            await self._delete_requested_topics()
            await self.log_dir_events.collect()
        live = await self._registered_brokers()
        eligible = live - self.shutting_down
        created: list[tuple[str, int, PartitionState]] = []
        changed: list[_Change] = []
        unclean_allowed: dict[str, bool] = {}
        for topic, index, state in self._partitions(everything, partitions):
            if state.partition_epoch < 0:
                created.append((topic.name, index,
                                election.initial_state(state.replicas, eligible, self.epoch)))
                continue
            unclean = unclean_allowed.get(topic.name)
            if unclean is None:
                unclean = unclean_allowed[topic.name] = TopicConfig(
                    self.config, topic.configs)["unclean.leader.election.enable"]
            offline = self.log_dir_events.offline_brokers(topic.name, index)
            change = self._decide(topic.name, index, state, live - offline,
                                  eligible - offline, unclean)
            if change is not None:
                changed.append(change)
        await self._create_states(created)
        await self._write_changes(changed)
        await self.reassignments.reconcile(live, {(c.topic, c.index) for c in changed})
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + _PRUNE_INTERVAL_S
            await self._prune_state_changes()

    def _partitions(self, everything: bool, partitions: set[tuple[str, int]]
                    ) -> Iterator[tuple[TopicMetadata, int, PartitionState]]:
        if everything:
            for topic in list(self.image.topics.values()):
                for index, state in enumerate(topic.partitions):
                    yield topic, index, state
            return
        for name, index in sorted(partitions):
            found = self.image.topics.get(name)
            if found is not None and index < len(found.partitions):
                yield found, index, found.partitions[index]

    async def _prune_state_changes(self) -> None:
        """Delete change nodes this controller has known for ``_CHANGE_RETENTION_S``:
        every broker applied them long before (one that did not lost its session, and
        reads every state again when it rejoins)."""
        names = await self.zk.children(znodes.STATE_CHANGES) or []
        now = time.monotonic()
        self._changes_seen = {name: self._changes_seen.get(name, now) for name in names}
        old = [name for name, seen in self._changes_seen.items()
               if now - seen > _CHANGE_RETENTION_S]
        for name in old:
            del self._changes_seen[name]
        await asyncio.gather(*(self.zk.delete(f"{znodes.STATE_CHANGES}/{name}")
                               for name in old), return_exceptions=True)

    def _decide(self, topic: str, index: int, state: PartitionState, live: set[int],
                eligible: set[int], unclean: bool) -> _Change | None:
        decided = election.elect_offline(state, eligible, unclean_allowed=unclean,
                                         controller_epoch=self.epoch)
        if decided is None:
            for broker in self.shutting_down & set(state.isr):
                decided = election.elect_for_shutdown(state, eligible | {broker}, broker,
                                                      self.epoch)
                if decided is not None:
                    break
        if decided is not None:
            return _Change(topic, index, state, decided.state, decided.unclean)
        shrunk = election.without_replicas(state, set(state.replicas) - live, self.epoch)
        return None if shrunk is None else _Change(topic, index, state, shrunk)

    async def _registered_brokers(self) -> set[int]:
        """The brokers registered now, read from ZooKeeper rather than from the cache: a
        restarted follower registers before it fetches, so one its leader has just put
        back in the ISR is always among them, where the cache may not have seen the
        registration yet, and the follower would be dropped from the ISR as dead."""
        return {int(child) for child in await self.zk.children(znodes.BROKER_IDS) or []}

    # ------------------------------------------------------------------- writes
    async def _create_states(self, created: list[tuple[str, int, PartitionState]]) -> None:
        """Write new partitions' first states in multi-ops (half as many partitions as
        ``znodes.STATE_WRITES_PER_MULTI``: two nodes each), sent together (KAFKA-5642's
        pipelining), where one round trip per partition made a topic of 10,000
        partitions wait minutes."""
        for topic in dict.fromkeys(name for name, _, _ in created):
            await self.zk.ensure(znodes.partitions_path(topic))
        await asyncio.gather(*(self._create_chunk(chunk) for chunk in znodes.multi_op_batches(
            created, znodes.STATE_WRITES_PER_MULTI // 2)))

    async def _create_chunk(self, chunk: list[tuple[str, int, PartitionState]]) -> None:
        ops: list[Op] = [Check(znodes.CONTROLLER_EPOCH, self._epoch_version)]
        for topic, index, state in chunk:
            ops.append(Create(f"{znodes.partitions_path(topic)}/{index}", b""))
            ops.append(Create(znodes.partition_state_path(topic, index),
                              znodes.encode_partition_state(state)))
        firsts = [self._change(topic, index, state.with_partition_epoch(0))
                  for topic, index, state in chunk]
        ops.append(znodes.state_change_node(firsts))
        try:
            written = await self.zk.multi(ops)
        except TransactionFailed as exc:
            self._check_fenced(exc)
            # Some exist already (an earlier controller's partial work, or the cache
            # catching up): each one alone.
            for topic, index, state in chunk:
                await self._create_state(topic, index, state)
            return
        await self.cache.apply_written(firsts, written[-1])
        (first_topic, first, _), (last_topic, last, _) = chunk[0], chunk[-1]
        log.info("first states of %d partition(s) written, %s-%d to %s-%d", len(chunk),
                 first_topic, first, last_topic, last)

    async def _create_state(self, topic: str, index: int, state: PartitionState) -> None:
        await self.zk.ensure(f"{znodes.partitions_path(topic)}/{index}")
        first = self._change(topic, index, state.with_partition_epoch(0))
        try:
            written = await self.zk.multi([
                Check(znodes.CONTROLLER_EPOCH, self._epoch_version),
                Create(znodes.partition_state_path(topic, index),
                       znodes.encode_partition_state(state)),
                znodes.state_change_node([first]),
            ])
        except TransactionFailed as exc:
            self._check_fenced(exc)  # else it exists already: the cache is catching up
            return
        await self.cache.apply_written([first], written[-1])
        log.info("%s-%d: led by %d, ISR %s", topic, index, state.leader, list(state.isr))

    async def _write_changes(self, changes: list[_Change]) -> list[bool]:
        """Write partitions' new states, conditioned on the versions they were decided
        on: in multi-ops of ``znodes.STATE_WRITES_PER_MULTI``, sent together. A multi
        refused as a whole (one partition changed meanwhile) is written again one by
        one, so that only the changed partition fails and is decided again on its
        newer state. Whether each was written."""
        written = await asyncio.gather(*(self._write_chunk(chunk)
                                         for chunk in znodes.multi_op_batches(changes)))
        return [ok for chunk in written for ok in chunk]

    async def _write_chunk(self, chunk: list[_Change]) -> list[bool]:
        """One multi-op. Refused (a partition changed meanwhile), the states' versions
        are read together, those that moved are left out (decided again once their
        newer state arrives), and the others sent again: a round trip or two, where
        ZooKeeper naming only the first state it refuses, or a write per partition,
        took one per stale partition (seconds at 10,000 partitions under load)."""
        if len(chunk) == 1:
            return [await self._write_one(chunk[0])]
        written_states = self._state_changes(chunk)
        ops: list[Op] = [Check(znodes.CONTROLLER_EPOCH, self._epoch_version)]
        ops.extend(SetData(znodes.partition_state_path(c.topic, c.index),
                           znodes.encode_partition_state(c.after), c.before.partition_epoch)
                   for c in chunk)
        ops.append(znodes.state_change_node(written_states))
        try:
            written = await self.zk.multi(ops)
        except TransactionFailed as exc:
            self._check_fenced(exc)
            versions = await self.zk.versions(
                [znodes.partition_state_path(c.topic, c.index) for c in chunk])
            current = [c for c, v in zip(chunk, versions, strict=True)
                       if v == c.before.partition_epoch]
            if len(current) == len(chunk):  # refused for another reason
                return [await self._write_one(change) for change in chunk]
            retried = dict(zip(map(id, current), await self._write_chunk(current),
                               strict=True)) if current else {}
            return [retried.get(id(change), False) for change in chunk]
        await self.cache.apply_written(written_states, written[-1])
        for change in chunk:
            self._written(change)
        moved = sum(c.after.leader != c.before.leader for c in chunk)
        log.info("wrote %d partition state(s), %d new leader(s): %s-%d to %s-%d", len(chunk),
                 moved, chunk[0].topic, chunk[0].index, chunk[-1].topic, chunk[-1].index)
        return [True] * len(chunk)

    async def _write_one(self, change: _Change) -> bool:
        """Write one partition's new state; False if it changed meanwhile (decide again)."""
        written_states = self._state_changes([change])
        try:
            written = await self.zk.multi([
                Check(znodes.CONTROLLER_EPOCH, self._epoch_version),
                SetData(znodes.partition_state_path(change.topic, change.index),
                        znodes.encode_partition_state(change.after),
                        change.before.partition_epoch),
                znodes.state_change_node(written_states),
            ])
        except TransactionFailed as exc:
            # A leader changed the ISR meanwhile: decided again on the newer state.
            self._check_fenced(exc)
            return False
        await self.cache.apply_written(written_states, written[-1])
        self._written(change, logging.INFO)
        return True

    async def _write_states(self, changes: list[tuple[str, int, PartitionState,
                                                      PartitionState]]) -> list[bool]:
        """``_write_changes`` for ``cluster.reassignment``, which decides its own."""
        return await self._write_changes([_Change(*change) for change in changes])

    def _change(self, topic: str, index: int, state: PartitionState) -> znodes.StateChange:
        return znodes.StateChange(topic, self.image.topic_id(topic), index, state)

    def _state_changes(self, changes: list[_Change]) -> list[znodes.StateChange]:
        """``changes`` as written: each state with the version its znode takes, one past
        the version the write is conditioned on. Built once a write, for its change node
        and for this broker's cache both."""
        return [self._change(c.topic, c.index,
                             c.after.with_partition_epoch(c.before.partition_epoch + 1))
                for c in changes]

    def _written(self, change: _Change, level: int = logging.DEBUG) -> None:
        """Count and log a written state: those of a batch at DEBUG (at 10,000
        partitions a line each at INFO was a fifth of the controller's time in a
        controlled shutdown), with a line for the batch at INFO."""
        before, after = change.before, change.after
        self.leader_elections += after.leader != before.leader
        log.log(level, "%s-%d: leader %d -> %d (epoch %d), ISR %s -> %s", change.topic,
                change.index, before.leader, after.leader, after.leader_epoch,
                list(before.isr), list(after.isr))
        if change.unclean:
            self.unclean_leader_elections += 1
            log.warning("%s-%d: unclean leader election: broker %d was not in sync (ISR "
                        "%s) and now leads; records acknowledged by the ISR may be lost",
                        change.topic, change.index, after.leader, list(before.isr))

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
            decided_now: list[_Change] = []
            for topic_name, index in pending:
                state = self.image.partition(topic_name, index)
                if state is None:
                    results[topic_name, index] = UNKNOWN_PARTITION
                    continue
                decided = election.elect_on_request(state, eligible, election_type,
                                                    self.epoch)
                if isinstance(decided, ErrorCode):
                    results[topic_name, index] = (decided, None)
                else:
                    decided_now.append(_Change(topic_name, index, state, decided.state,
                                               decided.unclean))
            pending = []
            for change, ok in zip(decided_now, await self._write_changes(decided_now),
                                  strict=True):
                if ok:
                    results[change.topic, change.index] = (ErrorCode.none, None)
                    leaders[change.topic, change.index] = change.after.leader
                else:
                    pending.append((change.topic, change.index))
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
            changes = []
            for topic, index, state in imbalanced:
                decided = election.elect_preferred(state, eligible, self.epoch)
                if decided is not None:
                    changes.append(_Change(topic.name, index, state, decided.state))
            await self._write_changes(changes)


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
