"""Confluent's compatibility levels: which earlier versions a new schema is checked
against, and in which direction.

BACKWARD: the new schema reads data written with the latest one (consumers upgrade
first); FORWARD: the latest reads the new one's data (producers upgrade first); FULL:
both. The ``_TRANSITIVE`` levels check against every live version, not only the latest.
"""

from __future__ import annotations

from collections.abc import Sequence

from gregor.schemas import errors
from gregor.schemas.schema_types import ParsedSchema

DEFAULT_LEVEL = "BACKWARD"
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE")


def validate_level(level: object) -> str:
    """The level, upper-cased as clients may send it lower-cased; 42203 otherwise."""
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise errors.invalid_compatibility_level(level)
    return level.upper()


def incompatibilities(level: str, new: ParsedSchema,
                      earlier: Sequence[ParsedSchema]) -> list[str]:
    """What breaks ``level`` between ``new`` and the subject's live versions
    ``earlier`` (oldest first); empty when compatible."""
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += [f"backward: {p}" for p in new.read_problems(old)]
        if base in ("FORWARD", "FULL"):
            problems += [f"forward: {p}" for p in old.read_problems(new)]
    return problems
