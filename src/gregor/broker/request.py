"""What a handler receives and may return."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from gregor.protocol.codec import RequestHeader
from gregor.protocol.fetch_response import Chunk
from gregor.security.session import Session


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any
    client_host: str
    client_port: int
    # The connection's listener and principal: one object per connection, not per request.
    session: Session

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
