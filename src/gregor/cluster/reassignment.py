"""Partition reassignment (KIP-455): moving a partition's replicas to other brokers.

The sequence is Kafka's (``KafkaController.onPartitionReassignment``), with the
replica set kept in the topic's node in Kafka's layout, so a controller elected
mid-move finds the reassignment there and carries it on:

1. Started (AlterPartitionReassignments, or the older ``/admin/reassign_partitions``
   node): the replica set becomes the target's replicas and the original's together
   (RS = TRS + ORS), with ``adding_replicas`` (TRS - ORS) and ``removing_replicas``
   (ORS - TRS) beside it. Brokers added see themselves in the replica set and start
   fetching from the leader, which admits them to the ISR once caught up.
2. Once every target replica is in the ISR, the controller writes the partition's
   state with the removed replicas out of the ISR and, if its leader is leaving,
   leadership moved to the first target replica in sync (a new leader epoch),
   through the controller's batched state writes; then the topic's node with the
   target as replica set. Brokers removed see they are no longer replicas: they stop
   and delete the partition's log.
3. Cancelled (a null target), the adding replicas become the removed ones and the
   original replica set is restored at once, without waiting on the ISR.

Only partitions being reassigned are looked at in each pass of the controller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from gregor.cluster import znodes
from gregor.cluster.partition_state import PartitionState, Reassignment
from gregor.cluster.zookeeper import Check, Delete, SetData, TransactionFailed
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.cluster.zk_controller import ZkController

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# A partition's answer: an error code and its message (None when none).
Result = tuple[ErrorCode, str | None]
OK: Result = (ErrorCode.none, None)
# The controller's batched, conditioned write of partition states: (topic, index,
# state decided on, new state) each; whether each was written.
WriteStates = Callable[[list[tuple[str, int, PartitionState, PartitionState]]],
                       Awaitable[list[bool]]]

# How long a completed partition is watched for a removed replica its leader let back
# into the ISR just before it learnt that replica was leaving.
_SETTLE_S = 10.0
# How long an AlterPartitionReassignments waits for this broker's metadata to show
# what it wrote, so that a ListPartitionReassignments next lists it.
_SHOWN_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Ongoing:
    """ListPartitionReassignments' view of one partition."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def invalid_target(target: tuple[int, ...], live: Collection[int]) -> str | None:
    """Why a target replica list is refused (Kafka's INVALID_REPLICA_ASSIGNMENT), if it is."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {list(target)}"
    missing = [r for r in target if r not in live]
    if missing:
        return f"Replica(s) {missing} are not live brokers"
    return None


def started(replicas: tuple[int, ...], ongoing: Reassignment | None,
            target: tuple[int, ...]) -> tuple[tuple[int, ...], Reassignment | None]:
    """The replica set and reassignment once a move to ``target`` starts, from the
    current replica set (and the reassignment it is in, which the new one replaces):
    RS = (TRS + ORS) without repeats, as Kafka orders it, so the target's order is
    the final one. None when nothing needs to move (a new order only: done at once)."""
    original = ongoing.original(replicas) if ongoing is not None else replicas
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not removing:
        return target, None
    return tuple(dict.fromkeys(target + original)), Reassignment(adding, removing)


def finished_state(state: PartitionState, target: tuple[int, ...], live: Collection[int],
                   controller_epoch: int) -> PartitionState | None:
    """The partition's state once its replica set is ``target``: only target replicas in
    the ISR, led by one (the current leader if it stays, else the first target replica
    in sync and live, at a new leader epoch). ``state`` itself when nothing changes;
    None when no target replica could lead now (the move waits)."""
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in isr and state.leader in live:
        if isr == state.isr:
            return state
        return replace(state, isr=isr, controller_epoch=controller_epoch)
    for replica in target:
        if replica in isr and replica in live:
            return replace(state, leader=replica, leader_epoch=state.leader_epoch + 1,
                           isr=isr, controller_epoch=controller_epoch)
    return None


class Reassignments:
    """The controller's part in reassignments: start, cancel and list them, and carry
    them on in each of its passes. A part of ``ZkController`` kept in a module of its
    own: it uses the controller's session, epoch and batched state writes."""

    def __init__(self, controller: ZkController, write_states: WriteStates) -> None:
        self.controller = controller
        self.write_states = write_states
        # Cancelled: finished without waiting for the original replicas' ISR.
        self._cancelled: set[TopicPartition] = set()
        # Finished, and when (monotonic): watched for a removed replica back in the ISR.
        self._settling: dict[TopicPartition, float] = {}
        # Whether /admin/reassign_partitions must be read at the next pass: at the first
        # pass of each controller epoch, when its watch fires, and when a move ends
        # (to take it out of the node), not at every pass.
        self._legacy_pending = True
        self._legacy_epoch = -1

    @property
    def image(self):
        return self.controller.image

    # --------------------------------------------------------------- requests
    def list(self, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Ongoing]:
        """The reassignments in progress (of ``partitions``, or all)."""
        wanted = self.image.reassigning if partitions is None else {
            tp: self.image.reassigning[tp] for tp in partitions if tp in self.image.reassigning}
        result = {}
        for tp, reassignment in wanted.items():
            state = self.image.partition(*tp)
            if state is not None:
                result[tp] = Ongoing(state.replicas, reassignment.adding, reassignment.removing)
        return result

    async def alter(self, targets: Mapping[TopicPartition, tuple[int, ...] | None], *,
                    allow_replication_factor_change: bool = True
                    ) -> dict[TopicPartition, Result]:
        """Start, replace or cancel (a None target) each partition's reassignment; answered
        once the topics' nodes say so (the moves themselves go on afterwards)."""
        live = await self.controller._registered_brokers()
        results: dict[TopicPartition, Result] = {}
        by_topic: dict[str, dict[int, tuple[tuple[int, ...], Reassignment | None]]] = {}
        for tp, target in targets.items():
            outcome = self._decide(tp, target, live, allow_replication_factor_change)
            if isinstance(outcome, tuple) and isinstance(outcome[0], ErrorCode):
                results[tp] = outcome  # type: ignore[assignment]
                continue
            by_topic.setdefault(tp[0], {})[tp[1]] = outcome  # type: ignore[assignment]
        for topic, changes in by_topic.items():
            error = await self._write_assignment(topic, changes)
            for index, (replicas, reassignment) in changes.items():
                results[topic, index] = error or OK
                if error is None:
                    log.info("%s-%d: reassignment %s (replicas %s, adding %s, removing %s)",
                             topic, index, "started" if reassignment else "settled",
                             list(replicas), list(reassignment.adding if reassignment else ()),
                             list(reassignment.removing if reassignment else ()))
        written = {(t, i): c for t, changes in by_topic.items() for i, c in changes.items()
                   if results[t, i] == OK}
        for tp, target in targets.items():
            if target is None and tp in written:
                self._cancelled.add(tp)

        self.controller.changed()
        await self.controller.cache.wait_until(lambda: all(
            self._shown(tp, replicas, reassignment)
            for tp, (replicas, reassignment) in written.items()), _SHOWN_WAIT_S)
        return results

    def _shown(self, tp: TopicPartition, replicas: tuple[int, ...],
               reassignment: Reassignment | None) -> bool:
        """Whether this broker's image shows a write of the partition's replica set and
        reassignment, or the end of that reassignment (the controller may be that quick)."""
        state = self.image.partition(*tp)
        if state is None:
            return True  # deleted meanwhile
        ongoing = self.image.reassigning.get(tp)
        if ongoing == reassignment and state.replicas == replicas:
            return True
        return (reassignment is not None and ongoing is None
                and state.replicas == reassignment.target(replicas))

    def _decide(self, tp: TopicPartition, target: tuple[int, ...] | None, live: set[int],
                allow_replication_factor_change: bool
                ) -> Result | tuple[tuple[int, ...], Reassignment | None]:
        state = self.image.partition(*tp)
        if state is None:
            return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        ongoing = self.image.reassigning.get(tp)
        if target is None:
            if ongoing is None:
                return (ErrorCode.no_reassignment_in_progress,
                        f"no reassignment of {tp[0]}-{tp[1]} is in progress")
            # The replicas it added leave; the original ones stay.
            return state.replicas, Reassignment((), ongoing.adding)
        reason = invalid_target(target, live)
        if reason is not None:
            return ErrorCode.invalid_replica_assignment, reason
        original = ongoing.original(state.replicas) if ongoing else state.replicas
        if not allow_replication_factor_change and len(target) != len(original):
            return (ErrorCode.invalid_replica_assignment,
                    f"The replication factor is changed from {len(original)} to "
                    f"{len(target)}")
        self._cancelled.discard(tp)
        return started(state.replicas, ongoing, target)

    # ------------------------------------------------------------------- passes
    async def reconcile(self, live: set[int], busy: Collection[TopicPartition]) -> None:
        """One pass of the controller: the older ``/admin/reassign_partitions`` node, then
        each partition being reassigned (those in ``busy`` have a write of the
        controller's own in this pass, and wait for the next)."""
        await self._legacy_requests(live)
        finishing: list[tuple[str, int, PartitionState, PartitionState]] = []
        targets: dict[TopicPartition, tuple[int, ...]] = {}
        stray: list[tuple[str, int, PartitionState, PartitionState]] = []
        for tp, reassignment in list(self.image.reassigning.items()):
            state = self.image.partition(*tp)
            if state is None or tp in busy or state.partition_epoch < 0:
                continue
            target = reassignment.target(state.replicas)
            in_sync = all(r in state.isr for r in target)
            if not in_sync and tp not in self._cancelled:
                # A replaced reassignment's replicas that left the replica set leave the ISR.
                kept = tuple(r for r in state.isr if r in state.replicas)
                if kept and kept != state.isr:
                    stray.append((*tp, state, replace(state, isr=kept,
                                                      controller_epoch=self.controller.epoch)))
                continue
            after = finished_state(state, target, live, self.controller.epoch)
            if after is None:
                continue
            targets[tp] = target
            if after != state:
                finishing.append((*tp, state, after))
        now = time.monotonic()
        for tp, since in list(self._settling.items()):
            state = self.image.partition(*tp)
            if state is None or now - since > _SETTLE_S:
                del self._settling[tp]
            elif tp not in busy and tp not in self.image.reassigning and not set(
                    state.isr) <= set(state.replicas):
                kept = tuple(r for r in state.isr if r in state.replicas)
                if kept:
                    stray.append((*tp, state, replace(state, isr=kept,
                                                      controller_epoch=self.controller.epoch)))
        written = await self.write_states(finishing + stray)
        refused = {(t, i) for (t, i, _, _), ok in zip(finishing, written, strict=False)
                   if not ok}
        done: dict[str, dict[int, tuple[tuple[int, ...], Reassignment | None]]] = {}
        for tp, target in targets.items():
            if tp not in refused:
                done.setdefault(tp[0], {})[tp[1]] = (target, None)
        for topic, changes in done.items():
            if await self._write_assignment(topic, changes) is None:
                for index, (replicas, _) in changes.items():
                    log.info("%s-%d: reassignment done, replicas now %s", topic, index,
                             list(replicas))
                    self._cancelled.discard((topic, index))
                    self._settling[topic, index] = now
                self._legacy_pending = True  # the older node may name it

    async def _write_assignment(self, topic: str,
                                changes: Mapping[int, tuple[tuple[int, ...],
                                                            Reassignment | None]]
                                ) -> Result | None:
        """Write the topic's node with ``changes`` (per partition: replica set, and the
        reassignment in progress or None), conditioned on its version and on the
        controller's epoch; None when written, else the partitions' error."""
        path = znodes.topic_path(topic)
        for _ in range(3):
            found = await self.controller.zk.get(path)
            if found is None:
                return ErrorCode.unknown_topic_or_partition, f"unknown topic {topic!r}"
            stored = znodes.TopicAssignment.decode(found[0])
            replicas = list(stored.replicas)
            reassigning = dict(stored.reassigning)
            for index, (new_replicas, reassignment) in changes.items():
                replicas[index] = new_replicas
                if reassignment is None:
                    reassigning.pop(index, None)
                else:
                    reassigning[index] = reassignment
            data = znodes.TopicAssignment(stored.topic_id, tuple(replicas), reassigning).encode()
            try:
                await self.controller.zk.multi([
                    Check(znodes.CONTROLLER_EPOCH, self.controller._epoch_version),
                    SetData(path, data, found[1].version)])
                return None
            except TransactionFailed as exc:
                self.controller._check_fenced(exc)  # else the topic changed: read it again
        return ErrorCode.reassignment_in_progress, f"topic {topic!r} kept changing"

    # ------------------------------------------------- /admin/reassign_partitions
    async def _legacy_requests(self, live: set[int]) -> None:
        """Start what ``/admin/reassign_partitions`` asks that is not under way, and take
        out of it what is done; the node goes when nothing in it is left, which is how
        tools of that time knew the moves were over."""
        if self._legacy_epoch != self.controller.epoch:
            self._legacy_epoch, self._legacy_pending = self.controller.epoch, True
        if not self._legacy_pending:
            return
        self._legacy_pending = False
        zk = self.controller.zk
        found = await zk.get(znodes.REASSIGN_PARTITIONS, self._legacy_changed)
        if found is None:
            return
        try:
            asked = znodes.decode_legacy_reassignment(found[0])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring %s: %r", znodes.REASSIGN_PARTITIONS, exc)
            asked = {}
        to_start: dict[TopicPartition, tuple[int, ...] | None] = {}
        left = {}
        for tp, target in asked.items():
            state = self.image.partition(*tp)
            if state is None or invalid_target(target, live) is not None:
                log.warning("%s: dropping %s-%d -> %s (unknown partition or invalid replicas)",
                            znodes.REASSIGN_PARTITIONS, *tp, list(target))
                continue
            ongoing = self.image.reassigning.get(tp)
            current = ongoing.target(state.replicas) if ongoing else state.replicas
            if current != target:
                to_start[tp] = target
            if current != target or ongoing is not None:
                left[tp] = target
        if to_start:
            await self.alter(to_start)
        try:
            if not left:
                await zk.multi([Check(znodes.CONTROLLER_EPOCH, self.controller._epoch_version),
                                Delete(znodes.REASSIGN_PARTITIONS, found[1].version)])
                log.info("%s: every reassignment in it is done", znodes.REASSIGN_PARTITIONS)
            elif left != asked:
                await zk.multi([Check(znodes.CONTROLLER_EPOCH, self.controller._epoch_version),
                                SetData(znodes.REASSIGN_PARTITIONS,
                                        znodes.encode_legacy_reassignment(left),
                                        found[1].version)])
        except (TransactionFailed, NoNodeError) as exc:
            if isinstance(exc, TransactionFailed):
                self.controller._check_fenced(exc)
            self._legacy_changed()  # rewritten meanwhile: read again

    def _legacy_changed(self) -> None:
        self._legacy_pending = True
        self.controller.changed()

