"""ACLs in ZooKeeper, in Kafka's layout (AclAuthorizer, ZooKeeper mode), so every broker
enforces the same set and Kafka's tools read and write it:

- ``/kafka-acl/<ResourceType>/<name>`` (literal patterns, ``*`` included) and
  ``/kafka-acl-extended/prefixed/<ResourceType>/<prefix>``, each
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}``;
- a sequential node per change: ``/kafka-acl-changes/acl_changes_<n>`` holding
  ``Topic:<name>`` for literal ones, ``/kafka-acl-extended-changes/acl_changes_<n>``
  holding ``{"version":1,"resourceType":"Topic","name":...,"patternType":"Prefixed"}``.

Every broker watches both change nodes and reads the ACLs again when one appears.
Notifications older than 15 minutes are removed by whoever reads them, as in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from gregor.cluster.metadata_image import MetadataImage
from gregor.cluster.zookeeper import ZooKeeperSession
from gregor.security.acls import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AclBinding,
    PatternType,
    ResourceType,
)

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
_CHANGE = "acl_changes_"
_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_TYPES = {name: kind for kind, name in RESOURCE_NAMES.items()}
_OPERATIONS = {name: op for op, name in OPERATION_NAMES.items()}
_PERMISSIONS = {name: permission for permission, name in PERMISSION_NAMES.items()}
_Resource = tuple[ResourceType, str, PatternType]


def _path(resource: _Resource) -> str:
    kind, name, pattern = resource
    root = PREFIXED_ROOT if pattern == PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{RESOURCE_NAMES[kind]}/{name}"


def _encode(acls: Iterable[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": acl.principal, "permissionType": PERMISSION_NAMES[acl.permission],
         "operation": OPERATION_NAMES[acl.operation], "host": acl.host}
        for acl in sorted(acls, key=str)]}, separators=(",", ":")).encode()


def _decode(resource: _Resource, data: bytes) -> set[AclBinding]:
    kind, name, pattern = resource
    acls = set()
    for item in json.loads(data).get("acls", []):
        acls.add(AclBinding(kind, name, pattern, item["principal"], item["host"],
                            _OPERATIONS[item["operation"]],
                            _PERMISSIONS[item["permissionType"]]))
    return acls


class ZkAcls:
    def __init__(self, zk: ZooKeeperSession, image: MetadataImage) -> None:
        self.zk = zk
        self.image = image
        self._reading: asyncio.Task[None] | None = None
        self._again = False

    async def start(self) -> None:
        """Read every ACL and follow both change nodes (again after a new session)."""
        for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
            await self.zk.ensure(path)
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await self.zk.children(root, self._changed)
        await self._read_all()

    async def change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        by_resource: dict[_Resource, tuple[set[AclBinding], set[AclBinding]]] = {}
        for index, acls in enumerate((added, removed)):
            for acl in acls:
                entry = by_resource.setdefault(
                    (acl.resource_type, acl.resource_name, acl.pattern_type), (set(), set()))
                entry[index].add(acl)
        for resource, (adding, removing) in by_resource.items():
            await self._update(resource, adding, removing)
            kind, name, pattern = resource
            if pattern == PatternType.PREFIXED:
                await self.zk.create(f"{EXTENDED_CHANGES}/{_CHANGE}", json.dumps(
                    {"version": 1, "resourceType": RESOURCE_NAMES[kind], "name": name,
                     "patternType": "Prefixed"}).encode(), sequence=True)
            else:
                await self.zk.create(f"{LITERAL_CHANGES}/{_CHANGE}",
                                     f"{RESOURCE_NAMES[kind]}:{name}".encode(), sequence=True)
        await self._read_all()  # this broker's own image follows at once

    async def _update(self, resource: _Resource, adding: set[AclBinding],
                      removing: set[AclBinding]) -> None:
        """Read-modify-write of one resource's node, conditioned on its version (another
        broker may change the same resource at once)."""
        path = _path(resource)
        while True:
            found = await self.zk.get(path)
            current = _decode(resource, found[0]) if found and found[0] else set()
            wanted = (current - removing) | adding
            try:
                if found is None:
                    if wanted:
                        await self.zk.create(path, _encode(wanted), makepath=True)
                elif wanted:
                    await self.zk.set(path, _encode(wanted), version=found[1].version)
                else:
                    await self.zk.delete(path, version=found[1].version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed meanwhile: read it again

    def _changed(self) -> None:
        if self._reading is not None and not self._reading.done():
            self._again = True
            return
        self._reading = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            self._again = False
            try:
                for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
                    await self._expire(root, await self.zk.children(root, self._changed) or [])
                await self._read_all()
            except Exception:
                log.exception("reading ACL changes failed")
            if not self._again:
                return

    async def _expire(self, root: str, names: list[str]) -> None:
        now_ms = time.time() * 1000
        for name in names:
            found = await self.zk.get(f"{root}/{name}")
            if found is not None and now_ms - found[1].ctime > _CHANGE_EXPIRATION_MS:
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(f"{root}/{name}")

    async def _read_all(self) -> None:
        acls: set[AclBinding] = set()
        for root, pattern in ((LITERAL_ROOT, PatternType.LITERAL),
                              (PREFIXED_ROOT, PatternType.PREFIXED)):
            for type_name in await self.zk.children(root) or []:
                kind = _TYPES.get(type_name)
                if kind is None:
                    continue
                for name in await self.zk.children(f"{root}/{type_name}") or []:
                    resource = (kind, name, pattern)
                    found = await self.zk.get(_path(resource))
                    if found is None or not found[0]:
                        continue
                    try:
                        acls |= _decode(resource, found[0])
                    except (ValueError, KeyError):
                        log.warning("ignoring unreadable ACLs of %s %s", type_name, name)
        self.image.acls = acls
