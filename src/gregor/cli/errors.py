"""Errors the command line reports as one ``gregor: error: ...`` line."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException


class CliError(Exception):
    """A failure the user can act on; its text is the whole message, no traceback."""


def kafka_error_text(exc: KafkaException) -> str:
    """The human part of a librdkafka error: the broker's error message when it sent one."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)
