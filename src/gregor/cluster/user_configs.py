"""Users' and client ids' entity configs -- SCRAM credentials and client quotas -- kept
where Kafka keeps them: in the metadata, ``MetadataImage.user_configs`` (user -> config
name -> value, the values as Kafka writes them: a SCRAM credential is
``salt=...,iterations=4096``) and ``MetadataImage.client_quotas`` (entity path -> quota
-> value, :mod:`gregor.security.quota_entities`).

A single broker stores them in its metadata file (:class:`ImageUserConfigs`); a
cluster in ZooKeeper (:mod:`gregor.cluster.zk_user_configs`), from where every broker's
image follows them. Both answer reads from the image, so an authentication costs no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from gregor.cluster.metadata_image import MetadataImage

V = TypeVar("V")

# user -> config name -> new value, or None to remove it.
UserConfigChanges = Mapping[str, Mapping[str, str | None]]
# entity path -> quota -> new value, or None to remove it.
QuotaChanges = Mapping[str, Mapping[str, float | None]]


class UserConfigs(Protocol):
    image: MetadataImage

    async def alter(self, changes: UserConfigChanges) -> None:
        """Apply ``changes`` (already checked) for every user they name, durably."""
        ...

    async def alter_quotas(self, changes: QuotaChanges) -> None:
        """Apply quota ``changes`` (already checked) for every entity they name, durably."""
        ...


def changed(current: Mapping[str, V], changes: Mapping[str, V | None]) -> dict[str, V]:
    """An entity's configs after ``changes``."""
    result = dict(current)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


class ImageUserConfigs:
    """A single broker's: in its metadata file, written before the change is answered."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    async def alter(self, changes: UserConfigChanges) -> None:
        for user, user_changes in changes.items():
            configs = changed(self.image.user_configs.get(user, {}), user_changes)
            if configs:
                self.image.user_configs[user] = configs
            else:
                self.image.user_configs.pop(user, None)
        self.image.save()

    async def alter_quotas(self, changes: QuotaChanges) -> None:
        quotas = self.image.client_quotas
        for path, entity_changes in changes.items():
            quotas.set(path, changed(quotas.entities.get(path, {}), entity_changes))
        self.image.save()
