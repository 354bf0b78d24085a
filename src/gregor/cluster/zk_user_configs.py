"""Users' entity configs in ZooKeeper, in Kafka's layout, so that every broker of a
cluster authenticates against the same credentials and Kafka's own tools can manage them.

- ``/config/users/<user>``: ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,..."}}``,
  the user name sanitized as Kafka does (URL-encoded).
- ``/config/changes/config_change_<n>`` (sequential): ``{"version":2,
  "entity_path":"users/<user>"}`` after each change; brokers watch the changes node and
  read the users named there again. Notifications older than 15 minutes are removed by
  whoever reads them, as Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.parse

from kazoo.exceptions import NodeExistsError, NoNodeError

from gregor.cluster.metadata_image import MetadataImage
from gregor.cluster.user_configs import UserConfigChanges, changed
from gregor.cluster.zookeeper import ZooKeeperSession

log = logging.getLogger(__name__)

USERS = "/config/users"
CHANGES = "/config/changes"
_CHANGE_PREFIX = "config_change_"
_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL encoding as Java's URLEncoder does it, ``*`` and ``~``
    encoded and spaces as ``%20``."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


class ZkUserConfigs:
    def __init__(self, zk: ZooKeeperSession, image: MetadataImage) -> None:
        self.zk = zk
        self.image = image
        self._last_change = -1
        self._refreshing: asyncio.Task[None] | None = None
        self._again = False

    async def start(self) -> None:
        """Read every user's configs and follow the change notifications from now on
        (also after a new session: watches do not survive one)."""
        for path in (USERS, CHANGES):
            await self.zk.ensure(path)
        users = await self.zk.children(USERS) or []
        self._last_change = max((_sequence(name) for name in
                                 await self.zk.children(CHANGES, self._changed) or []),
                                default=-1)
        self.image.user_configs = {}
        for user in users:
            await self._read(desanitize(user))

    async def alter(self, changes: UserConfigChanges) -> None:
        for user, user_changes in changes.items():
            path = f"{USERS}/{sanitize(user)}"
            found = await self.zk.get(path)
            current = json.loads(found[0]).get("config", {}) if found and found[0] else {}
            data = json.dumps({"version": 1, "config": changed(current, user_changes)},
                              separators=(",", ":")).encode()
            try:
                await self.zk.set(path, data)
            except NoNodeError:
                try:
                    await self.zk.create(path, data, makepath=True)
                except NodeExistsError:
                    await self.zk.set(path, data)
            await self.zk.create(f"{CHANGES}/{_CHANGE_PREFIX}", json.dumps(
                {"version": 2, "entity_path": f"users/{sanitize(user)}"}).encode(),
                sequence=True)
            # Our own image follows at once, not when the notification comes round.
            await self._read(user)

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
                user = _user_of(data)
                if user is not None:
                    await self._read(user)
            if now_ms - stat.ctime > _CHANGE_EXPIRATION_MS:
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(path)

    async def _read(self, user: str) -> None:
        found = await self.zk.get(f"{USERS}/{sanitize(user)}")
        configs: dict[str, str] = {}
        if found is not None and found[0]:
            try:
                configs = {str(k): str(v) for k, v in
                           json.loads(found[0]).get("config", {}).items()}
            except (ValueError, AttributeError):
                log.warning("ignoring unreadable configs of user %r", user)
        if configs:
            self.image.user_configs[user] = configs
        else:
            self.image.user_configs.pop(user, None)


def _sequence(name: str) -> int:
    try:
        return int(name[len(_CHANGE_PREFIX):])
    except ValueError:
        return -1


def _user_of(data: bytes) -> str | None:
    """The user a change notification names (version 2 ``entity_path`` or version 1's
    ``entity_type``/``entity_name``); None for other entities (topics, clients)."""
    try:
        raw = json.loads(data)
        if raw.get("version") == 1:
            kind, name = raw.get("entity_type"), raw.get("entity_name")
        else:
            kind, _, name = str(raw.get("entity_path", "")).partition("/")
    except (ValueError, AttributeError):
        return None
    if kind != "users" or not name or "/" in name:
        return None
    return desanitize(name)
