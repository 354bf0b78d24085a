"""Event times as the pipelines' JSON spells them: ISO 8601 in UTC with milliseconds.

Epoch milliseconds are what Kafka timestamps and Spark's watermark arithmetic use, so
code works in milliseconds and converts only at the edges (JSON payloads, command-line
arguments).
"""

from __future__ import annotations

from datetime import UTC, datetime

JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
"""The Spark (``to_json``) pattern that writes what :func:`iso_utc` writes, given UTC."""


def iso_utc(ms: int) -> str:
    """``2026-11-22T10:42:37.439Z``: readable, sortable, and parsed by Spark's ``from_json``."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time(text: str) -> int:
    """Epoch milliseconds from a number of milliseconds or an ISO 8601 date or time.

    A time without an offset is taken as UTC, like every time in the pipelines.
    """
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError as exc:
        raise ValueError(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time "
            "(e.g. 2026-11-22 or 2026-11-22T10:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
