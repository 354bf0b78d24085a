"""Client quota entities as Kafka names and stores them, and which one applies to a client.

An entity is a user, a client id, or a user with a client id, each either named or
the default (``<default>``). Kafka keeps one config node per entity in ZooKeeper, and
gregor keys its quota configs by the same relative path, names sanitized as Kafka's
``Sanitizer`` does (so a user literally called ``<default>`` is ``%3Cdefault%3E``):

- ``users/<user>``, ``users/<default>``
- ``clients/<client-id>``, ``clients/<default>``
- ``users/<user>/clients/<client-id>``, ``users/<user>/clients/<default>``,
  ``users/<default>/clients/<client-id>``, ``users/<default>/clients/<default>``

For each quota, the most specific entity that sets it applies (Kafka's
``DefaultQuotaCallback``), and it also says which clients share one measured rate: a
quota on ``users/alice`` is shared by all of alice's client ids, one on
``clients/<default>`` is measured per client id.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT = "<default>"
USER = "user"
CLIENT_ID = "client-id"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's quota configs of users and client ids, and whether each is a whole number
# (a LONG in Kafka's QuotaConfigs) rather than a DOUBLE.
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL encoding as Java's URLEncoder does it, ``*`` and ``~``
    encoded and spaces as ``%20``."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def entity_path(components: Mapping[str, str | None]) -> str:
    """The path of an entity given as Kafka's request components (entity type -> name,
    None for the default); raises ValueError for anything Kafka refuses."""
    unknown = set(components) - {USER, CLIENT_ID}
    if unknown:
        raise ValueError(f"Unhandled client quota entity type: {sorted(unknown)[0]}")
    parts = []
    if USER in components:
        parts.append(f"users/{_segment(components[USER])}")
    if CLIENT_ID in components:
        parts.append(f"clients/{_segment(components[CLIENT_ID])}")
    if not parts:
        raise ValueError("Invalid empty client quota entity")
    return "/".join(parts)


def components_of(path: str) -> dict[str, str | None]:
    """The inverse of :func:`entity_path` (for describing an entity)."""
    segments = path.split("/")
    result: dict[str, str | None] = {}
    for kind, name in zip(segments[::2], segments[1::2], strict=True):
        result[USER if kind == "users" else CLIENT_ID] = (
            None if name == DEFAULT else desanitize(name))
    return result


def is_entity_path(path: str) -> bool:
    """Whether a ZooKeeper config path (relative to ``/config``) is a quota entity's."""
    segments = path.split("/")
    return (len(segments) == 2 and segments[0] in ("users", "clients")
            or len(segments) == 4 and segments[0] == "users" and segments[2] == "clients"
            ) and all(segments[1::2])


def _segment(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


@dataclass(frozen=True, slots=True)
class AppliedQuota:
    """The quota a client is held to for one quota type: its bound, and the key of the
    rate it shares with every client the same entity covers in the same way."""

    bound: float
    shared_by: tuple[str, str, str]  # quota key, user tag, client id tag


@dataclass
class QuotaConfigs:
    """Every entity's quota configs (entity path -> quota key -> value), as the metadata
    holds them; ``version`` moves on every change, so a connection knows when the quota
    it resolved may have changed."""

    entities: dict[str, dict[str, float]] = field(default_factory=dict)
    version: int = 0

    def set(self, path: str, values: Mapping[str, float]) -> None:
        """An entity's quotas, all of them (none: the entity has no quota any more)."""
        if values:
            self.entities[path] = dict(values)
        else:
            self.entities.pop(path, None)
        self.version += 1

    def applied(self, key: str, user: str, client_id: str) -> AppliedQuota | None:
        """The quota ``key`` a client is held to, by Kafka's precedence; None when no
        entity that covers the client sets it."""
        entities = self.entities
        if not entities:
            return None
        for path, tags in _candidates(sanitize(user), sanitize(client_id)):
            values = entities.get(path)
            if values is not None and key in values:
                return AppliedQuota(values[key], (key, *tags))
        return None


def _candidates(user: str, client: str) -> Iterable[tuple[str, tuple[str, str]]]:
    """The entities that may cover a client (sanitized names), most specific first, each
    with the (user, client id) tags of the rate they share (Kafka's metric tags)."""
    both = (user, client)
    yield f"users/{user}/clients/{client}", both
    yield f"users/{user}/clients/{DEFAULT}", both
    yield f"users/{user}", (user, "")
    yield f"users/{DEFAULT}/clients/{client}", both
    yield f"users/{DEFAULT}/clients/{DEFAULT}", both
    yield f"users/{DEFAULT}", (user, "")
    yield f"clients/{client}", ("", client)
    yield f"clients/{DEFAULT}", ("", client)
