"""GroupCoordinator: Kafka's classic group protocol, request by request and timer by timer.

The rules follow Kafka's ``GroupCoordinator`` closely, because clients depend on
its exact answers: which error makes a consumer rejoin (REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION), which makes it forget its member id (UNKNOWN_MEMBER_ID), and
when a parked JoinGroup or SyncGroup is answered.

Everything here runs on the broker's event loop and is synchronous except the
waits of JoinGroup and SyncGroup, which park on a future per member. Deadlines are
loop timers (:mod:`gregor.groups.timers`): a member's session, a rebalance's join
phase (the longest rebalance timeout among members), its sync phase, and the
initial rebalance delay of a new group. So no state change can interleave with
another, and a client that vanishes mid-rebalance is removed by a timer instead of
wedging the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from gregor.cluster.controller import ClusterAdmin
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.groups import records
from gregor.groups.group import Group, GroupState, TopicPartition
from gregor.groups.group_persistence import group_metadata_record, load_groups
from gregor.groups.member import Member, Protocols
from gregor.groups.offset_and_metadata import OffsetAndMetadata
from gregor.groups.offsets_store import OFFSETS_TOPIC, OffsetsStore, StoreError
from gregor.groups.timers import Timers
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# A new member's JoinGroup may be abandoned by a client that timed out and retried;
# Kafka gives up on such a member after five minutes (NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    # JoinGroup v4+: a member without an id is first handed one (MEMBER_ID_REQUIRED).
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # Only the leader gets the members (id, instance id, metadata) to assign partitions to.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, controller: ClusterAdmin,
                 replica_manager: ReplicaManager) -> None:
        self.config = config
        self.store = OffsetsStore(config, controller, replica_manager)
        self.groups: dict[str, Group] = {}
        self.timers = Timers()
        # __consumer_offsets partitions still being read; their groups answer
        # COORDINATOR_LOAD_IN_PROGRESS until then, as Kafka's do.
        self.loading: set[int] = set()
        self._load_tasks: set[asyncio.Task] = set()
        self._rejoin_tasks: set[asyncio.Task] = set()  # static members' answers to come
        self._led: set[int] = set()  # __consumer_offsets partitions led here (cluster)
        # TxnOffsetCommit offsets by producer id, then group: applied when the
        # transaction commits, dropped when it aborts.
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition,
                                                          OffsetAndMetadata]]] = {}

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Begin loading groups and offsets from ``__consumer_offsets`` in the background.

        In a cluster only the partitions this broker leads are loaded, when it
        becomes their leader (``leadership_changed``).
        """
        if self.store.exists() and not self.config.zookeeper_mode:
            self._load(set(range(self.store.num_partitions)))

    def leadership_changed(self, index: int, leading: bool) -> None:
        """This broker started or stopped leading ``__consumer_offsets`` partition ``index``:
        its groups move here (read back from the log) or away (forgotten: the new
        coordinator reads them from its replica)."""
        if leading == (index in self._led):
            return  # another change (the ISR) of a partition whose leadership stays
        if leading:
            self._led.add(index)
            self._load({index})
            return
        self._led.discard(index)
        self.loading.discard(index)
        for group_id in [g for g in self.groups if self.store.partition_for(g) == index]:
            del self.groups[group_id]  # its timers find it gone and do nothing
        log.info("no longer coordinating the groups of %s-%d", OFFSETS_TOPIC, index)

    def _load(self, indexes: set[int]) -> None:
        self.loading |= indexes
        task = asyncio.create_task(self._load_partitions(sorted(indexes)))
        self._load_tasks.add(task)
        task.add_done_callback(self._load_tasks.discard)

    async def shutdown(self) -> None:
        for task in [*self._load_tasks, *self._rejoin_tasks]:
            task.cancel()
        await asyncio.gather(*self._load_tasks, *self._rejoin_tasks, return_exceptions=True)
        self.timers.cancel_all()

    def check_group(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode | None:
        """Why a request for ``group_id`` cannot be served now, or None.

        OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept the empty
        group id (old consumers committed under it); the membership APIs do not.
        """
        if group_id is None or (group_id == "" and not allow_empty):
            return ErrorCode.invalid_group_id
        if len(group_id.encode()) > records.MAX_STRING_BYTES:
            # Flexible requests carry longer strings than Kafka's records can store.
            return ErrorCode.invalid_group_id
        if self.loading and self.store.partition_for(group_id) in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if not self.store.leads(group_id):
            return ErrorCode.not_coordinator
        return None

    # ---------------------------------------------------------------- JoinGroup
    async def ensure_store(self) -> ErrorCode | None:
        """Create ``__consumer_offsets`` on first use; the error to answer if it cannot be.

        Clients look up their coordinator first, which creates it, but a client that
        talks to the broker directly may join or commit first.
        """
        try:
            await self.store.ensure_topic()
        except StoreError as exc:
            return exc.error
        return None

    async def join_group(self, request: JoinRequest) -> JoinResult:
        error = self.check_group(request.group_id) or await self.ensure_store()
        if error is None and not (
                self.config["group.min.session.timeout.ms"] <= request.session_timeout_ms
                <= self.config["group.max.session.timeout.ms"]):
            error = ErrorCode.invalid_session_timeout
        if error is not None:
            return JoinResult(error, request.member_id)
        is_unknown_member = request.member_id == ""
        group = self.groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = self._new_group(request.group_id)
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if is_unknown_member:
            self._join_new_member(group, request, waiter)
        else:
            self._join_known_member(group, request, waiter)
        self._maybe_complete_join(group)
        return await waiter

    def _join_new_member(self, group: Group, request: JoinRequest,
                         waiter: asyncio.Future[JoinResult]) -> None:
        if group.is_in(GroupState.DEAD):
            waiter.set_result(JoinResult(ErrorCode.coordinator_not_available, ""))
        elif not group.supports_protocols(request.protocol_type, request.protocols):
            waiter.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, ""))
        else:
            member_id = group.new_member_id(request.client_id, request.group_instance_id)
            old_member_id = group.static_member_id(request.group_instance_id)
            if old_member_id is not None:
                self._replace_static_member(group, old_member_id, member_id, request, waiter)
            elif request.group_instance_id is None and request.require_known_member_id:
                group.pending_members.add(member_id)
                self._schedule_session_expiry(group, member_id, request.session_timeout_ms)
                waiter.set_result(JoinResult(ErrorCode.member_id_required, member_id))
            else:
                self._add_member_and_rebalance(group, member_id, request, waiter)

    def _join_known_member(self, group: Group, request: JoinRequest,
                           waiter: asyncio.Future[JoinResult]) -> None:
        member_id = request.member_id
        instance_id = request.group_instance_id
        if group.is_in(GroupState.DEAD):
            waiter.set_result(JoinResult(ErrorCode.coordinator_not_available, member_id))
        elif not group.supports_protocols(request.protocol_type, request.protocols):
            waiter.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._add_member_and_rebalance(group, member_id, request, waiter)
        elif group.is_static_member_fenced(instance_id, member_id):
            waiter.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id))
        elif not group.has_member(member_id) or (
                instance_id is not None and group.static_member_id(instance_id) is None):
            waiter.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
        else:
            member = group.members[member_id]
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._update_member_and_rebalance(group, member, request, waiter)
            elif group.is_in(GroupState.COMPLETING_REBALANCE):
                if member.matches(request.protocols):
                    # It lost the JoinGroup answer: send this generation's again.
                    waiter.set_result(self._join_result(group, member))
                else:
                    self._update_member_and_rebalance(group, member, request, waiter)
            elif group.is_in(GroupState.STABLE):
                if member_id == group.leader_id or not member.matches(request.protocols):
                    # A leader's rejoin is how a consumer asks for a new assignment
                    # (e.g. its subscribed topics gained partitions).
                    self._update_member_and_rebalance(group, member, request, waiter)
                else:
                    waiter.set_result(self._join_result(group, member))
            else:
                waiter.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))

    def _add_member_and_rebalance(self, group: Group, member_id: str, request: JoinRequest,
                                  waiter: asyncio.Future[JoinResult]) -> None:
        member = Member(
            member_id=member_id, group_instance_id=request.group_instance_id,
            client_id=request.client_id, client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type, protocols=request.protocols,
            join_waiter=waiter)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_session_expiry(group, member_id, NEW_MEMBER_JOIN_TIMEOUT_MS)
        log.info("group %s: member %s joins (client %s, instance %s)", group.group_id, member_id,
                 request.client_id, request.group_instance_id)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, request: JoinRequest,
                                     waiter: asyncio.Future[JoinResult]) -> None:
        self._update_member(member, request, waiter)
        self._maybe_prepare_rebalance(group)

    @staticmethod
    def _update_member(member: Member, request: JoinRequest,
                       waiter: asyncio.Future[JoinResult]) -> None:
        # A JoinGroup already parked for this member came from a connection the client
        # has given up on; tell it to rejoin rather than leave it hanging.
        member.answer_join(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.join_waiter = waiter

    def _replace_static_member(self, group: Group, old_member_id: str, new_member_id: str,
                               request: JoinRequest, waiter: asyncio.Future[JoinResult]) -> None:
        """A static member restarted: it takes its old place, without a rebalance if possible."""
        current_leader = group.leader_id or ""
        member = group.members[old_member_id]
        member.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        member.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        self.timers.cancel(("session", group.group_id, old_member_id))
        assert request.group_instance_id is not None
        group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        self._update_member(member, request, waiter)
        self._schedule_session_expiry(group, new_member_id, member.session_timeout_ms)
        log.info("group %s: static member %s rejoins as %s", group.group_id,
                 request.group_instance_id, new_member_id)
        if group.is_in(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                task = asyncio.get_running_loop().create_task(
                    self._answer_rejoin_once_stored(group, member, current_leader))
                self._rejoin_tasks.add(task)
                task.add_done_callback(self._rejoin_tasks.discard)
            else:
                self._maybe_prepare_rebalance(group)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may have been sent the old member id: assign again.
            self._prepare_rebalance(group)

    # ---------------------------------------------------------------- rebalance
    async def _answer_rejoin_once_stored(self, group: Group, member: Member,
                                         leader_id: str) -> None:
        """Answer a restarted static member of a Stable group once its new member id is
        on every in-sync replica, as Kafka's storeGroup callback does: a coordinator
        moving meanwhile would know only the old id and fence the new one. A failure is
        answered as such (the client joins again, and is replaced again)."""
        member_id, generation = member.member_id, group.generation_id
        error = await self._store_group_replicated(group)
        if (group.members.get(member_id) is not member or group.generation_id != generation
                or not group.is_in(GroupState.STABLE)):
            return  # replaced again, or a rebalance began: that answers the member
        if error != ErrorCode.none:
            member.answer_join(JoinResult(error, member_id))
            return
        # The old leader id is returned on purpose: were the restarted member the
        # leader, it must not compute an assignment a Stable group would never hand
        # out; it just fetches its own with SyncGroup.
        member.answer_join(JoinResult(ErrorCode.none, member_id, generation,
                                      group.protocol_type, group.protocol_name, leader_id))

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_assignments(group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        self.timers.cancel(("sync", group.group_id))
        if group.is_in(GroupState.EMPTY):
            delay = self.config["group.initial.rebalance.delay.ms"]
            group.transition_to(GroupState.PREPARING_REBALANCE, now_ms())
            group.initial_delay_active = True
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            group.transition_to(GroupState.PREPARING_REBALANCE, now_ms())
            self._schedule_join_timeout(group)
        log.info("group %s: preparing rebalance (generation %d, %d members)", group.group_id,
                 group.generation_id, len(group.members))

    def _schedule_join_timeout(self, group: Group) -> None:
        self.timers.schedule(("join", group.group_id), group.rebalance_timeout_ms,
                             lambda: self._on_join_timeout(group))

    def _schedule_initial_join(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        self.timers.schedule(("join", group.group_id), delay_ms,
                             lambda: self._on_initial_delay_expired(group, remaining_ms))

    def _on_initial_delay_expired(self, group: Group, remaining_ms: int) -> None:
        if not self._is_live(group):
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config["group.initial.rebalance.delay.ms"], remaining_ms)
            self._schedule_initial_join(group, delay, max(remaining_ms - delay, 0))
            return
        group.initial_delay_active = False
        self._complete_join(group)

    def _on_join_timeout(self, group: Group) -> None:
        if self._is_live(group):
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        """Complete the join phase as soon as every known member has rejoined."""
        if (group.is_in(GroupState.PREPARING_REBALANCE) and not group.initial_delay_active
                and group.all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        self.timers.cancel(("join", group.group_id))
        # Dynamic members that did not rejoin in time are gone; static members keep
        # their place until their session expires.
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("group %s: member %s did not rejoin in time", group.group_id,
                         member.member_id)
                self._drop_member(group, member)
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined remain: give them another round.
            self._schedule_join_timeout(group)
            return
        group.init_next_generation(now_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self._store_group(group)
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name,
                 group.leader_id)
        for member in list(group.members.values()):
            member.answer_join(self._join_result(group, member))
            self._schedule_session_expiry(group, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self.timers.schedule(("sync", group.group_id), group.rebalance_timeout_ms,
                             lambda: self._on_sync_timeout(group))

    def _on_sync_timeout(self, group: Group) -> None:
        """Members that never sent SyncGroup after the join phase are removed."""
        if not self._is_live(group) or not group.is_in(GroupState.COMPLETING_REBALANCE,
                                                       GroupState.STABLE):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("group %s: member %s did not sync in time", group.group_id, member_id)
                self._remove_member(group, member)

    @staticmethod
    def _join_result(group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, metadata)
                            for m, metadata in group.current_member_metadata())
        return JoinResult(ErrorCode.none, member.member_id, group.generation_id,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members)

    @staticmethod
    def _reset_assignments(group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.answer_sync(SyncResult(error))

    # ---------------------------------------------------------------- SyncGroup
    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        error = self.check_group(group_id)
        if error is not None:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        error = self._check_member(group, member_id, group_instance_id, generation_id)
        if error is None and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and group.is_in(GroupState.PREPARING_REBALANCE):
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return SyncResult(error)
        member = group.members[member_id]
        self._end_pending_sync(group, member_id)
        if group.is_in(GroupState.STABLE):
            self._schedule_session_expiry(group, member_id, member.session_timeout_ms)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            unknown = set(assignments) - set(group.members)
            if unknown:
                log.info("group %s: leader assigned partitions to %d unknown member(s)",
                         group_id, len(unknown))
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            generation = group.generation_id
            error = await self._store_group_replicated(group)
            if not (group.is_in(GroupState.COMPLETING_REBALANCE)
                    and group.generation_id == generation):
                # A member joined or left meanwhile: that rebalance answered the waiters.
                return await waiter
            if error != ErrorCode.none:
                self._reset_assignments(group, error)
                self._maybe_prepare_rebalance(group)
                return await waiter
            group.transition_to(GroupState.STABLE, now_ms())
            for m in group.members.values():
                if m.awaiting_sync:
                    m.answer_sync(SyncResult(ErrorCode.none, group.protocol_type,
                                             group.protocol_name, m.assignment))
                    self._schedule_session_expiry(group, m.member_id, m.session_timeout_ms)
        return await waiter

    def _end_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(("sync", group.group_id))

    # ---------------------------------------------------------- Heartbeat/Leave
    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        error = self.check_group(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = self._check_member(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        member = group.members[member_id]
        self._schedule_session_expiry(group, member_id, member.session_timeout_ms)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members (by member id, or by instance id alone as admin tools do)."""
        error = self.check_group(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        errors = []
        for member_id, instance_id in leaving:
            if member_id == "":
                current = group.static_member_id(instance_id)
                if current is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                member_id = current
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self.timers.cancel(("session", group_id, member_id))
                self._maybe_complete_join(group)
                errors.append(ErrorCode.none)
            elif group.is_static_member_fenced(instance_id, member_id):
                errors.append(ErrorCode.fenced_instance_id)
            elif group.has_member(member_id):
                log.info("group %s: member %s leaves", group_id, member_id)
                self._remove_member(group, group.members[member_id])
                errors.append(ErrorCode.none)
            else:
                errors.append(ErrorCode.unknown_member_id)
        return ErrorCode.none, errors

    @staticmethod
    def _check_member(group: Group, member_id: str, group_instance_id: str | None,
                      generation_id: int) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if not group.has_member(member_id):
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    # ----------------------------------------------------------- member expiry
    def _schedule_session_expiry(self, group: Group, member_id: str, timeout_ms: int) -> None:
        self.timers.schedule(("session", group.group_id, member_id), timeout_ms,
                             lambda: self._on_session_expired(group, member_id))

    def _on_session_expired(self, group: Group, member_id: str) -> None:
        if not self._is_live(group):
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if member.keep_alive():
            self._schedule_session_expiry(group, member_id, member.session_timeout_ms)
            return
        log.info("group %s: member %s session expired", group.group_id, member_id)
        self._remove_member(group, member)

    def _drop_member(self, group: Group, member: Member) -> None:
        """Take a member out of the group, answering anything it has parked."""
        member.answer_join(JoinResult(ErrorCode.unknown_member_id, ""))
        member.answer_sync(SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        self.timers.cancel(("session", group.group_id, member.member_id))

    def _remove_member(self, group: Group, member: Member) -> None:
        """Drop a member and let the group react: rebalance, or finish a pending join."""
        self._drop_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------ offsets
    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       group_instance_id: str | None,
                       offsets: dict[TopicPartition, OffsetAndMetadata]) -> ErrorCode:
        """Validate the committer and store the offsets; one error for the whole commit.

        A negative generation with an empty member id is a consumer that assigns its
        partitions itself (assign()) and only uses the group to store offsets; that is
        allowed only while the group has no members.
        """
        error = self._check_committer(group_id, generation_id, member_id, group_instance_id)
        if error is not None:
            return error
        return self._store_offsets(group_id, offsets)

    def _check_committer(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None) -> ErrorCode | None:
        """Whether this member may commit offsets for the group now (None: it may)."""
        error = self.check_group(group_id, allow_empty=True)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.illegal_generation
            group = self._new_group(group_id)
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if not (generation_id < 0 and group.is_in(GroupState.EMPTY)):
            error = self._check_member(group, member_id, group_instance_id, generation_id)
            if error is not None:
                return error
            if group.is_in(GroupState.COMPLETING_REBALANCE):
                return ErrorCode.rebalance_in_progress
            member = group.members[member_id]
            self._schedule_session_expiry(group, member_id, member.session_timeout_ms)
        return None

    def _store_offsets(self, group_id: str,
                       offsets: dict[TopicPartition, OffsetAndMetadata]) -> ErrorCode:
        if not offsets:
            return ErrorCode.none
        try:
            self.store.append(group_id, [
                (records.offset_commit_key(group_id, topic, partition),
                 records.offset_commit_value(offset))
                for (topic, partition), offset in offsets.items()])
        except StoreError as exc:
            log.warning("group %s: storing offsets failed: %s", group_id, exc)
            # As in Kafka: a commit too big for one record batch is the client's to split.
            return ErrorCode.invalid_commit_offset_size if exc.too_large else exc.error
        self.groups[group_id].offsets.update(offsets)
        return ErrorCode.none

    def stage_transactional_offsets(self, group_id: str, producer: tuple[int, int],
                                    generation_id: int, member_id: str,
                                    group_instance_id: str | None,
                                    offsets: dict[TopicPartition, OffsetAndMetadata]
                                    ) -> ErrorCode:
        """TxnOffsetCommit: write the offsets as the producer's transactional batch, and
        keep them aside until its transaction's marker commits or aborts them.

        The committer is checked as for OffsetCommit, unless it names no generation and
        no member (TxnOffsetCommit v0-2, or a producer without the consumer's group
        metadata), which Kafka does not check.
        """
        if generation_id < 0 and not member_id:
            error = self.check_group(group_id, allow_empty=True)
        else:
            error = self._check_committer(group_id, generation_id, member_id,
                                          group_instance_id)
        if error is not None:
            return error
        if not offsets:
            return ErrorCode.none
        try:
            self.store.append(group_id, [
                (records.offset_commit_key(group_id, topic, partition),
                 records.offset_commit_value(offset))
                for (topic, partition), offset in offsets.items()], producer=producer)
        except StoreError as exc:
            log.warning("group %s: storing transactional offsets failed: %s", group_id, exc)
            return ErrorCode.invalid_commit_offset_size if exc.too_large else exc.error
        staged = self.pending_txn_offsets.setdefault(producer[0], {}).setdefault(group_id, {})
        staged.update(offsets)
        return ErrorCode.none

    def has_pending_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of the group's partition (KIP-447:
        a consumer asking for stable offsets must wait for it)."""
        return any(tp in groups.get(group_id, ()) for groups in self.pending_txn_offsets.values())

    def complete_transactional_offsets(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended (its marker is in ``__consumer_offsets``):
        its staged offsets become the groups' committed offsets, or are dropped."""
        staged = self.pending_txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in staged.items():
            group = self.groups.get(group_id) or self._new_group(group_id)
            group.offsets.update(offsets)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets of ``partitions`` (all the group has when None)."""
        error = self.check_group(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, {}
        if partitions is None:
            return ErrorCode.none, dict(group.offsets)
        return ErrorCode.none, {tp: group.offsets[tp] for tp in partitions if tp in group.offsets}

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: allowed for an empty group, or for topics a group does not consume."""
        error = self.check_group(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if group.is_in(GroupState.EMPTY):
            deletable = list(partitions)
        elif group.protocol_type == "consumer":
            deletable = []
            for tp in partitions:
                if group.is_subscribed_to(tp[0]):
                    results[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        doomed = [tp for tp in deletable if tp in group.offsets]
        try:
            self.store.append(group_id, [(records.offset_commit_key(group_id, *tp), None)
                                         for tp in doomed])
        except StoreError as exc:
            return exc.error, {}
        for tp in doomed:
            del group.offsets[tp]
        results.update((tp, ErrorCode.none) for tp in deletable)
        return ErrorCode.none, results

    def expire_offsets(self) -> None:
        """Apply offsets.retention.minutes; groups left empty without offsets die."""
        retention_ms = self.config["offsets.retention.minutes"] * 60 * 1000
        now = now_ms()
        for group in list(self.groups.values()):
            if self.check_group(group.group_id, allow_empty=True) is not None:
                continue
            expired = group.expired_offsets(now, retention_ms)
            dies = (group.is_in(GroupState.EMPTY) and not group.pending_members
                    and len(expired) == len(group.offsets))
            tombstones = [(records.offset_commit_key(group.group_id, *tp), None)
                          for tp in expired]
            if dies:
                tombstones.append((records.group_metadata_key(group.group_id), None))
            try:
                self.store.append(group.group_id, tombstones)
            except StoreError as exc:
                log.warning("group %s: expiring offsets failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            if expired:
                log.info("group %s: %d committed offset(s) expired", group.group_id,
                         len(expired))
            if dies:
                self._remove_group(group)

    # -------------------------------------------------------------------- admin
    def describe_group(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        error = self.check_group(group_id, allow_empty=True)
        if error is not None:
            return error, None
        return ErrorCode.none, self.groups.get(group_id)

    def list_groups(self) -> tuple[ErrorCode, list[Group]]:
        if self.loading:
            return ErrorCode.coordinator_load_in_progress, []
        return ErrorCode.none, [g for g in self.groups.values() if not g.is_in(GroupState.DEAD)]

    def delete_group(self, group_id: str) -> ErrorCode:
        error = self.check_group(group_id, allow_empty=True)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_in(GroupState.EMPTY):
            return ErrorCode.non_empty_group
        tombstones = [(records.offset_commit_key(group_id, *tp), None) for tp in group.offsets]
        tombstones.append((records.group_metadata_key(group_id), None))
        try:
            self.store.append(group_id, tombstones)
        except StoreError as exc:
            return exc.error
        log.info("group %s deleted", group_id)
        self._remove_group(group)
        return ErrorCode.none

    # ------------------------------------------------------------------ helpers
    def _new_group(self, group_id: str) -> Group:
        group = Group(group_id, now_ms())
        self.groups[group_id] = group
        return group

    def _remove_group(self, group: Group) -> None:
        group.transition_to(GroupState.DEAD, now_ms())
        del self.groups[group.group_id]

    def _is_live(self, group: Group) -> bool:
        """Whether a timer's group is still the one registered under its id."""
        return self.groups.get(group.group_id) is group and not group.is_in(GroupState.DEAD)

    async def _store_group_replicated(self, group: Group) -> ErrorCode:
        """Store a new generation's assignment and wait until every in-sync replica has
        it (acks=all, within offsets.commit.timeout.ms), as Kafka's storeGroup before
        it hands an assignment out: a coordinator that moves right after (its broker
        stopped, killed, or its followers behind under load) then loads this generation,
        not an older one whose members and generation would send the group's static
        members into a rebalance they should never see. A failure to replicate is
        answered as Kafka answers it (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) and the
        group rebalances again; one to append stays best effort (``_store_group``)."""
        self._store_group(group)
        return await self.store.replicated(group.group_id,
                                           self.config["offsets.commit.timeout.ms"] / 1000)

    def _store_group(self, group: Group) -> None:
        """Persist the group's generation and members (best effort).

        Only a restart within the members' sessions needs this record (to resume the
        group without a rebalance); offsets are stored separately. A failure -- e.g.
        member metadata too large for one record -- is logged and the group carries on.
        """
        try:
            self.store.append(group.group_id, [group_metadata_record(group)])
        except (StoreError, records.InvalidRecord) as exc:
            log.warning("group %s: storing group metadata failed: %s", group.group_id, exc)

    # ------------------------------------------------------------------ loading
    async def _load_partitions(self, indexes: list[int]) -> None:
        started = time.monotonic()
        for index in indexes:
            if index not in self.loading:
                continue  # leadership moved away again meanwhile
            try:
                groups, pending = await load_groups(self.store, index, now_ms())
                for producer_id, staged in pending.items():
                    for group_id, offsets in staged.items():
                        self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(
                            group_id, {}).update(offsets)
                for group in groups:
                    self.groups[group.group_id] = group
                    # Members of a restored Stable group resume their sessions: those
                    # still alive heartbeat on, the others expire as usual.
                    for member in group.members.values():
                        self._schedule_session_expiry(group, member.member_id,
                                                      member.session_timeout_ms)
            except Exception:
                log.exception("loading %s-%d failed; its groups start empty", OFFSETS_TOPIC,
                              index)
            finally:
                self.loading.discard(index)
        log.info("loaded %d groups from %d partition(s) of %s in %.2fs", len(self.groups),
                 len(indexes), OFFSETS_TOPIC, time.monotonic() - started)
