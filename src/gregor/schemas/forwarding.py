"""Writes that reach an instance other than the primary are sent on to the primary,
as Confluent's registry and Karapace do, so clients may call any instance."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from gregor.schemas import errors
from gregor.schemas.api import MEDIA_TYPE, Forward
from gregor.schemas.primary_election import SESSION_TIMEOUT, Primary, PrimaryElection

PRIMARY_WAIT_S = 3 * SESSION_TIMEOUT.total_seconds()
"""How long a write waits for a primary while the group elects one: a dead primary is
noticed after one session timeout, and the rebalance takes up to another."""
_FORWARD_TIMEOUT_S = 60.0


def forward_to_primary(election: PrimaryElection, catch_up: Callable[[], None]) -> Forward:
    """``catch_up`` reads this instance's topic to its end: a write answered by the
    primary is then visible here too, so a client reads its own writes at the instance
    it called."""
    async def forward(request: Request, body: bytes) -> Response | None:
        """None when this instance is the primary; else the primary's answer. A primary
        that does not take the connection has died (or stopped): the write waits for
        the group to elect another, then goes there."""
        deadline = time.monotonic() + PRIMARY_WAIT_S
        unreachable: Primary | None = None
        while True:
            primary = await run_in_threadpool(election.wait_for_primary,
                                              max(0.0, deadline - time.monotonic()),
                                              unreachable)
            if primary is None:
                raise errors.forwarding_error(
                    "no primary elected" if unreachable is None else
                    f"the primary {unreachable.url} does not answer and none replaced it")
            if primary.member_id == election.member_id:
                return None
            url = primary.url.rstrip("/") + request.url.path
            if request.url.query:
                url += "?" + request.url.query
            answer = await run_in_threadpool(_send, url, request.method, body)
            if answer is not None:
                await run_in_threadpool(catch_up)
                return answer
            unreachable = primary
    return forward


def _send(url: str, method: str, body: bytes) -> Response | None:
    """The primary's answer; None if it refused the connection (nothing was sent)."""
    sent = urllib.request.Request(url, data=body or None, method=method,
                                  headers={"Content-Type": MEDIA_TYPE})
    try:
        with urllib.request.urlopen(sent, timeout=_FORWARD_TIMEOUT_S) as answer:
            return Response(answer.read(), answer.status, media_type=MEDIA_TYPE)
    except urllib.error.HTTPError as refused:
        return Response(refused.read(), refused.code, media_type=MEDIA_TYPE)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise errors.forwarding_error(f"{url}: {exc.reason}") from None
    except OSError as exc:
        raise errors.forwarding_error(f"{url}: {exc}") from None
