"""A classic group's state: its state machine, members, generation and committed offsets.

The states and their allowed transitions are Kafka's (``ClassicGroupState``):

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance
      ^                 ^      |                             |
      |                 |      +--no member left--> Empty    | leader's SyncGroup
      |                 +------ member change ------ Stable <-+
    any state --delete / offsets expired--> Dead

This module only keeps state consistent; deciding *when* to move (timers, requests)
is the coordinator's job.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.serial import entity_reader

from gregor.groups.member import Member, Protocols
from gregor.groups.offset_and_metadata import NO_EXPIRE_TIMESTAMP, OffsetAndMetadata

CONSUMER_PROTOCOL_TYPE = "consumer"
TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

_subscription_reader = entity_reader(ConsumerProtocolSubscription)


class IllegalStateTransition(RuntimeError):
    """A coordinator bug: the state machine was asked for a move Kafka does not allow."""


class Group:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        # Members told MEMBER_ID_REQUIRED (JoinGroup v4+) that have not rejoined yet.
        self.pending_members: set[str] = set()
        # Members of the current generation that have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        self.static_members: dict[str, str] = {}
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.subscribed_topics: set[str] | None = None
        # While a new group waits group.initial.rebalance.delay.ms, each new member
        # extends the wait instead of the join completing as soon as all have joined.
        self.initial_delay_active = False
        self.new_member_added = False

    # ------------------------------------------------------------- state machine
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {state.value} is not allowed")
        self.state = state
        self.state_timestamp = now_ms

    # ------------------------------------------------------------------ members
    def new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """Kafka's member id shape: the client (or instance) id, a dash and a UUID."""
        return f"{group_instance_id or client_id}-{uuid.uuid4()}"

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        instance_id = member.group_instance_id if member is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Hand a static member's place (and assignment) to its restarted incarnation."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """Whether ``member_id`` claims an instance id now held by another member id."""
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def all_members_joined(self) -> bool:
        return (all(m.awaiting_join for m in self.members.values())
                and not self.pending_members)

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def elect_joined_leader(self) -> bool:
        """Make a member that has rejoined the leader if the leader has not; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m for m in self.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---------------------------------------------------------------- protocols
    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports (a name a member lists twice counts once)."""
        counts = Counter(name for m in self.members.values() for name in set(m.protocol_names()))
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        """Whether a joining member can share a protocol with everyone already in the group."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        candidates = self.candidate_protocols()
        return (protocol_type == self.protocol_type
                and any(name in candidates for name, _ in protocols))

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes.items(), key=lambda item: item[1])[0]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(GroupState.EMPTY, now_ms)

    def current_member_metadata(self) -> list[tuple[Member, bytes]]:
        assert self.protocol_name is not None
        return [(m, m.metadata(self.protocol_name)) for m in self.members.values()]

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the consumers subscribe to, read from their subscriptions; None if unknown.

        Only the "consumer" protocol's metadata has a known layout. Every version of
        ConsumerProtocolSubscription starts with the topic list, so the v0 reader suffices.
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for _, metadata in self.current_member_metadata():
            try:
                subscription, _ = _subscription_reader(metadata, 2)
            except Exception:  # a client's opaque bytes; unknown rather than wrong
                return None
            topics.update(subscription.topics)
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ------------------------------------------------------------------ offsets
    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Committed offsets due for deletion under offsets.retention.minutes (KIP-211).

        An empty group's offsets expire ``retention_ms`` after it became empty; a group
        that never had members (offsets committed with assign()) loses each offset that
        long after its commit; a stable consumer group only loses offsets of topics it no
        longer subscribes to. Commits that asked for an explicit retention (OffsetCommit
        v2-4) expire at their own timestamp.
        """
        kept: set[str]
        if self.protocol_type and self.is_in(GroupState.EMPTY):
            since_emptied, kept = True, set()
        elif self.protocol_type is None:
            since_emptied, kept = False, set()
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.is_in(GroupState.STABLE)
              and self.subscribed_topics is not None):
            since_emptied, kept = False, self.subscribed_topics
        else:
            return []
        expired = []
        for tp, offset in self.offsets.items():
            if tp[0] in kept:
                continue
            if offset.expire_timestamp != NO_EXPIRE_TIMESTAMP:
                if now_ms >= offset.expire_timestamp:
                    expired.append(tp)
                continue
            base = self.state_timestamp if since_emptied else offset.commit_timestamp
            if now_ms - base >= retention_ms:
                expired.append(tp)
        return expired
