"""Errors the command line reports as one ``gregor: error: ...`` line."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")


class CliError(Exception):
    """A failure the user can act on; its text is the whole message, no traceback."""


def kafka_error_text(exc: Exception) -> str:
    """The human part of a librdkafka error: the broker's error message when it sent one
    (any other exception, such as a future's timeout, speaks for itself)."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def admin_result(future: Future[T], what: str) -> T:
    """An admin call's result; its failure as ``cannot <what>: <librdkafka's reason>``."""
    try:
        return future.result()
    except KafkaException as exc:
        raise CliError(f"cannot {what}: {kafka_error_text(exc)}") from None
