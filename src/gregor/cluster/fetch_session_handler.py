"""FetchSessionHandler: a follower's half of an incremental fetch session (KIP-227).

The follower's first fetch to a leader names every partition it follows there and
opens a session. After that it names a partition only when what it would ask
changed (its log end after an append or a truncation, its leader epoch, its log
start) or it is new, and lists the partitions it stopped fetching as forgotten.
The leader answers only partitions with news, so a fetch round over thousands of
quiet partitions costs what its few busy ones cost, at both ends.

The handler learns which partitions may have changed from the fetcher
(``mark``) rather than by comparing every partition at every fetch. Any failure
(the leader forgot the session, an epoch out of step, a broken connection)
resets it: the next fetch is a full one again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gregor.cluster.fetch_sessions import INITIAL_EPOCH, NO_SESSION, next_epoch
from gregor.storage.log_manager import TopicPartition

# What a follower asks of a partition: leader epoch, fetch offset, last fetched epoch,
# log start offset.
FetchState = tuple[int, int, int, int]


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        # What the leader holds for each partition of the session: the state last sent.
        self._sent: dict[TopicPartition, FetchState] = {}
        self._marked: dict[TopicPartition, None] = {}
        self._forgotten: dict[TopicPartition, None] = {}

    @property
    def full(self) -> bool:
        """No session yet: the next fetch names every partition."""
        return self.session_id == NO_SESSION

    def mark(self, tp: TopicPartition) -> None:
        """``tp`` is (again) fetched, or its fetch state may have changed."""
        self._marked[tp] = None
        if self._forgotten.pop(tp, None) is not None:
            # Back from a backoff before the leader heard it was forgotten: named again
            # whatever it was, so that the leader reads it again (it may be quiet, and the
            # answer that sent it into the backoff was an error).
            self._sent.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` is no longer fetched (stopped, or backing off)."""
        self._marked.pop(tp, None)
        if tp in self._sent:
            self._forgotten[tp] = None

    def build(self, fetched: Iterable[TopicPartition],
              state: Callable[[TopicPartition], FetchState]
              ) -> tuple[list[tuple[TopicPartition, FetchState]], list[TopicPartition]]:
        """The partitions the next fetch names, with their states, and those it forgets.

        ``fetched`` is every partition fetched now; it is only walked for a full fetch.
        """
        if self.full:
            self._sent = {tp: state(tp) for tp in fetched}
            self._marked.clear()
            self._forgotten.clear()
            return list(self._sent.items()), []
        named = []
        for tp in self._marked:
            current = state(tp)
            if self._sent.get(tp) != current:
                self._sent[tp] = current
                named.append((tp, current))
        forgotten = list(self._forgotten)
        for tp in forgotten:
            self._sent.pop(tp, None)
        self._marked.clear()
        self._forgotten.clear()
        return named, forgotten

    def sent_epoch(self, tp: TopicPartition) -> int | None:
        """The leader epoch the leader holds for ``tp`` in this session: an answer about
        ``tp`` is about that epoch's fetch."""
        sent = self._sent.get(tp)
        return None if sent is None else sent[0]

    def answered(self, session_id: int) -> None:
        """The leader answered the fetch built last without an error."""
        if self.full:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """The session is gone or out of step: start over with a full fetch."""
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._sent.clear()
        self._marked.clear()
        self._forgotten.clear()
