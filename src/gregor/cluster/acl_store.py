"""Where the ACLs live: ``MetadataImage.acls``, read by the authorizer on every check.

A single broker keeps them in its metadata file (:class:`ImageAcls`); a cluster in
ZooKeeper, in Kafka's layout (:mod:`gregor.cluster.zk_acls`), from where every broker's
image follows them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gregor.cluster.metadata_image import MetadataImage
from gregor.security.acls import AclBinding


class AclStore(Protocol):
    image: MetadataImage

    async def change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        """Add and remove ACLs, durably, before this returns."""
        ...


class ImageAcls:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    async def change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        self.image.acls.difference_update(removed)
        self.image.acls.update(added)
        self.image.save()
