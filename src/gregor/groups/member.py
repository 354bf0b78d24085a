"""A member of a classic consumer group, and the requests it has parked at the coordinator."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

# Protocols a member supports, in its order of preference: (name, metadata) pairs.
Protocols = tuple[tuple[str, bytes], ...]


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    # A JoinGroup or SyncGroup parked until the rebalance reaches the next step.
    join_waiter: asyncio.Future[Any] | None = None
    sync_waiter: asyncio.Future[Any] | None = None
    # Until its first JoinGroup is answered a member has no generation to heartbeat with.
    is_new: bool = True

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Protocols) -> bool:
        """Whether a rejoin brings exactly the protocols and metadata already known."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def keep_alive(self) -> bool:
        """Whether a session expiry should spare this member.

        A member parked in JoinGroup or SyncGroup cannot heartbeat on that connection,
        so waiting there counts as being alive -- except for a brand-new member, whose
        JoinGroup may have been abandoned by a client that timed out and retried.
        """
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)

    def answer_join(self, result: Any) -> None:
        waiter, self.join_waiter = self.join_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def answer_sync(self, result: Any) -> None:
        waiter, self.sync_waiter = self.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
