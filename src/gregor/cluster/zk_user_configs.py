"""Users' and client ids' entity configs in ZooKeeper, in Kafka's layout, so that every
broker of a cluster authenticates against the same credentials and enforces the same
quotas, and Kafka's own tools can manage them.

- ``/config/users/<user>``: ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,...",
  "producer_byte_rate":"1048576"}}``, the user name sanitized as Kafka does
  (URL-encoded); ``/config/users/<default>`` for every user.
- ``/config/clients/<client-id>`` (and ``<default>``), ``/config/users/<user>/clients/
  <client-id>``: client quotas, Kafka's ``{"version":1,"config":{...}}`` too.
- ``/config/changes/config_change_<n>`` (sequential): ``{"version":2,
  "entity_path":"users/<user>"}`` (or ``clients/<id>``, ``users/<user>/clients/<id>``)
  after each change; brokers watch the changes node and read the entities named there
  again. Notifications older than 15 minutes are removed by whoever reads them, as
  Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping

from kazoo.exceptions import NodeExistsError, NoNodeError

from gregor.cluster.metadata_image import MetadataImage
from gregor.cluster.user_configs import QuotaChanges, UserConfigChanges, changed
from gregor.cluster.zookeeper import ZooKeeperSession
from gregor.security.quota_entities import (
    DEFAULT,
    QUOTA_KEYS,
    desanitize,
    is_entity_path,
    sanitize,
)

log = logging.getLogger(__name__)

CONFIG = "/config"
USERS = "/config/users"
CLIENTS = "/config/clients"
CHANGES = "/config/changes"
_CHANGE_PREFIX = "config_change_"
_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ZkUserConfigs:
    def __init__(self, zk: ZooKeeperSession, image: MetadataImage) -> None:
        self.zk = zk
        self.image = image
        self._last_change = -1
        self._refreshing: asyncio.Task[None] | None = None
        self._again = False

    async def start(self) -> None:
        """Read every entity's configs and follow the change notifications from now on
        (also after a new session: watches do not survive one)."""
        for path in (USERS, CLIENTS, CHANGES):
            await self.zk.ensure(path)
        users = await self.zk.children(USERS) or []
        clients = await self.zk.children(CLIENTS) or []
        self._last_change = max((_sequence(name) for name in
                                 await self.zk.children(CHANGES, self._changed) or []),
                                default=-1)
        self.image.user_configs = {}
        self.image.client_quotas.entities.clear()
        for user in users:
            await self._read(f"users/{user}")
            for client in await self.zk.children(f"{USERS}/{user}/clients") or []:
                await self._read(f"users/{user}/clients/{client}")
        for client in clients:
            await self._read(f"clients/{client}")

    async def alter(self, changes: UserConfigChanges) -> None:
        for user, user_changes in changes.items():
            await self._alter(f"users/{sanitize(user)}", user_changes)

    async def alter_quotas(self, changes: QuotaChanges) -> None:
        for path, entity_changes in changes.items():
            # Kafka writes whole-number quotas as integers, the others as Java prints a
            # double (``50.0``).
            await self._alter(path, {
                key: None if value is None else str(int(value)) if QUOTA_KEYS[key]
                else repr(float(value)) for key, value in entity_changes.items()})

    async def _alter(self, entity: str, entity_changes: Mapping[str, str | None]) -> None:
        """Change some of an entity's configs, keeping the others (a user's SCRAM
        credentials and quotas share its node), and say so to every broker."""
        path = f"{CONFIG}/{entity}"
        found = await self.zk.get(path)
        current = json.loads(found[0]).get("config", {}) if found and found[0] else {}
        data = json.dumps({"version": 1, "config": changed(current, entity_changes)},
                          separators=(",", ":")).encode()
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(path, data)
        await self.zk.create(f"{CHANGES}/{_CHANGE_PREFIX}", json.dumps(
            {"version": 2, "entity_path": entity}).encode(), sequence=True)
        # Our own image follows at once, not when the notification comes round.
        await self._read(entity)

    def _changed(self) -> None:
        """The changes node's children changed (a ZooKeeper watch: re-armed by reading)."""
        if self._refreshing is not None and not self._refreshing.done():
            self._again = True
            return
        self._refreshing = asyncio.get_running_loop().create_task(self._process_changes())

    async def _process_changes(self) -> None:
        while True:
            self._again = False
            try:
                await self._process_once()
            except Exception:
                log.exception("reading user config changes failed")
            if not self._again:
                return

    async def _process_once(self) -> None:
        names = sorted(await self.zk.children(CHANGES, self._changed) or [], key=_sequence)
        now_ms = time.time() * 1000
        for name in names:
            sequence = _sequence(name)
            path = f"{CHANGES}/{name}"
            found = await self.zk.get(path)
            if found is None:
                continue
            data, stat = found
            if sequence > self._last_change:
                self._last_change = sequence
                entity = _entity_of(data)
                if entity is not None:
                    await self._read(entity)
            if now_ms - stat.ctime > _CHANGE_EXPIRATION_MS:
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(path)

    async def _read(self, entity: str) -> None:
        """Take an entity's configs into the image: its quotas, and a named user's
        other configs (SCRAM credentials)."""
        found = await self.zk.get(f"{CONFIG}/{entity}")
        configs: dict[str, str] = {}
        if found is not None and found[0]:
            try:
                configs = {str(k): str(v) for k, v in
                           json.loads(found[0]).get("config", {}).items()}
            except (ValueError, AttributeError):
                log.warning("ignoring unreadable configs of %r", entity)
        quotas = {}
        for key in QUOTA_KEYS.keys() & configs.keys():
            try:
                quotas[key] = float(configs.pop(key))
            except ValueError:
                log.warning("ignoring unreadable quota %s of %r", key, entity)
        self.image.client_quotas.set(entity, quotas)
        kind, _, name = entity.partition("/")
        if kind != "users" or "/" in name or name == DEFAULT:
            return
        user = desanitize(name)
        if configs:
            self.image.user_configs[user] = configs
        else:
            self.image.user_configs.pop(user, None)


def _sequence(name: str) -> int:
    try:
        return int(name[len(_CHANGE_PREFIX):])
    except ValueError:
        return -1


def _entity_of(data: bytes) -> str | None:
    """The user or client entity a change notification names (version 2 ``entity_path``
    or version 1's ``entity_type``/``entity_name``); None for others (topics, brokers)."""
    try:
        raw = json.loads(data)
        if raw.get("version") == 1:
            path = f"{raw.get('entity_type')}/{raw.get('entity_name')}"
        else:
            path = str(raw.get("entity_path", ""))
    except (ValueError, AttributeError):
        return None
    return path if is_entity_path(path) else None
