"""What a handler receives and may return."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gregor.protocol.codec import RequestHeader
from gregor.protocol.fetch_response import Chunk
from gregor.security.quotas import TokenBucket
from gregor.security.session import Session


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any
    client_host: str
    client_port: int
    # The connection's listener and principal: one object per connection, not per request.
    session: Session
    # A consumer's fetch under a quota: called with its answer's size before the answer
    # is committed to the fetch session; the throttle time it earned (over its quota,
    # Kafka answers it empty: :meth:`gregor.broker.throttling.Charge.fetch_answer`).
    fetch_quota: Callable[[int], int] | None = None
    # CreateTopics, CreatePartitions, DeleteTopics under controller_mutation_rate
    # (KIP-599): the client's token bucket of partition mutations.
    mutation_quota: TokenBucket | None = None

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already framed by its handler, possibly with file regions (Fetch)."""

    chunks: list[Chunk]


@dataclass(frozen=True, slots=True)
class DelayedResponse:
    """A response that waits on other brokers (acks=all replication), not on this
    connection: the handler has done everything the request asked, and ``answer``
    only waits, then returns what the handler would have returned.

    The connection may read and handle the client's next produce meanwhile; the
    answers still go out in the order the requests came.
    """

    answer: Coroutine[Any, Any, Any]
