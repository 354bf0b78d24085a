"""FetchSessionCache: the broker's half of incremental fetch sessions (KIP-227).

A fetcher that keeps fetching the same partitions (a follower, most of all) need
not name every one in every request, nor hear about every one in every answer.
Its first fetch opens a session (epoch 0); the broker keeps what it asked for
each partition (offset, epochs, byte limit) and what it last answered (high
watermark, last stable offset, log start). Each later fetch names only the
partitions whose fetch state changed (and those to forget), and its answer holds
only partitions with something new: records, an error, a diverging epoch or a
moved high watermark, last stable offset or log start.

The broker's own work follows the same rule. Every change to a partition that a
fetch could report (an append, a high watermark or leadership change) goes
through ``touched``, which marks the partition in each session that holds it and
wakes the session's parked fetch. A session's fetch reads only the partitions its
request updated and those marked since its last answer, never the whole session:
with thousands of partitions of which a few have data, a fetch costs what those
few cost (Kafka's own sessions re-read every partition at each fetch; here the
marks make that unnecessary).

Sessions are kept up to ``max.incremental.fetch.session.cache.slots``; when it is
full a new session takes the place of the one unused longest, if that one has been
idle for ``min.incremental.fetch.session.eviction.ms`` (Kafka's two minutes), and
otherwise the fetch is answered without one (session id 0), which a fetcher takes
as "keep sending full fetches".
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gregor.storage.log_manager import TopicPartition

INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch that closes one, or uses none
NO_SESSION = 0
_MAX_EPOCH = 2**31 - 1
EVICTION_AFTER_S = 120.0  # Kafka's min.incremental.fetch.session.eviction.ms


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``; 0 is only ever the opening one, so it wraps to 1."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it, and what it was
    last told."""

    wanted: Any  # the FetchPartition of the request that last named it
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def changed(self, high_watermark: int, last_stable_offset: int,
                log_start_offset: int) -> bool:
        return (high_watermark != self.high_watermark
                or last_stable_offset != self.last_stable_offset
                or log_start_offset != self.log_start_offset)

    def answered(self, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int) -> None:
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset


class FetchSession:
    def __init__(self, session_id: int, replica_id: int, now: float) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch its next fetch must carry
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        # Partitions touched since the last answer (an ordered set).
        self.marked: dict[TopicPartition, None] = {}
        self.wakeup = asyncio.Event()
        self.last_used = now


class FetchSessionCache:
    def __init__(self, slots: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self._holding: dict[TopicPartition, set[FetchSession]] = {}

    def open(self, replica_id: int) -> FetchSession | None:
        """A new, empty session, or None if there is no room for one."""
        if self.slots <= 0:
            return None
        now = self.clock()
        if len(self.sessions) >= self.slots:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used)
            if now - oldest.last_used < EVICTION_AFTER_S:
                return None
            self.close(oldest.id)
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = random.randint(1, _MAX_EPOCH)
        session = FetchSession(session_id, replica_id, now)
        self.sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.last_used = self.clock()
        return session

    def close(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.forget(session, list(session.partitions))

    def update(self, session: FetchSession, tp: TopicPartition, wanted: Any) -> None:
        """The fetcher named ``tp`` (new to the session, or with a new fetch state)."""
        cached = session.partitions.get(tp)
        if cached is None:
            session.partitions[tp] = CachedPartition(wanted)
            self._holding.setdefault(tp, set()).add(session)
        else:
            cached.wanted = wanted

    def forget(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            if session.partitions.pop(tp, None) is None:
                continue
            session.marked.pop(tp, None)
            holders = self._holding.get(tp)
            if holders is not None:
                holders.discard(session)
                if not holders:
                    del self._holding[tp]

    def touched(self, tp: TopicPartition) -> None:
        """Something a fetch of ``tp`` reports may have changed: sessions holding it look
        at it in their next answer, and a fetch parked on one of them wakes."""
        holders = self._holding.get(tp)
        if holders:
            for session in holders:
                session.marked[tp] = None
                session.wakeup.set()

    def last_fetch(self, tp: TopicPartition, replica_id: int) -> float:
        """When ``replica_id`` last fetched in a session holding ``tp`` (-inf if none):
        that fetch counted ``tp`` at its cached offset, named or not (KIP-227)."""
        return max((session.last_used for session in self._holding.get(tp, ())
                    if session.replica_id == replica_id), default=float("-inf"))

    def position(self, tp: TopicPartition, replica_id: int, since: float) -> Any:
        """What ``replica_id`` last asked of ``tp`` in a session it used at or after
        ``since`` (its FetchPartition), or None: a fetcher names a partition only when
        its position changes, so this is where it is now."""
        for session in self._holding.get(tp, ()):
            if session.replica_id == replica_id and session.last_used >= since:
                return session.partitions[tp].wanted
        return None

    def __len__(self) -> int:
        return len(self.sessions)
