"""Kafka error codes, re-exported from kio so handlers never spell numbers."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
