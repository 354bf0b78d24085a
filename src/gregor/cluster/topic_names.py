"""Kafka's rules for topic names."""

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def invalid_topic_reason(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return "topic name may only contain ASCII letters, digits, '.', '_' and '-'"
    return None
