"""One committed offset, as OffsetCommit stores it and OffsetFetch returns it."""

from __future__ import annotations

from dataclasses import dataclass

NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Only OffsetCommit v2-4 can ask for a per-commit retention; newer commits expire
    # with their group instead (KIP-211), so this is usually NO_EXPIRE_TIMESTAMP.
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP
