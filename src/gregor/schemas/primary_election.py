"""Which instance writes: several registries join one Kafka group (protocol type "sr",
Karapace's way) and the group's leader names the primary in the assignment; the
others forward writes to it.

A group needs nothing but Kafka's group APIs, so this works on any Kafka-compatible
cluster, and a primary that dies stops heartbeating: the coordinator evicts it after
the session timeout and the survivors rejoin and name another. A new primary first
reads ``_schemas`` to its end, so that its next id is above every id written.

The member speaks the group protocol itself (kio requests over gregor's blocking
client connection, with the TLS and SASL settings of the registry's other Kafka
clients), since librdkafka's consumer groups admit only the "consumer" protocol type.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.find_coordinator.v3 import request as find_coordinator_request
from kio.schema.heartbeat.v3 import request as heartbeat_request
from kio.schema.join_group.v5 import request as join_group_request
from kio.schema.leave_group.v3 import request as leave_group_request
from kio.schema.sync_group.v3 import request as sync_group_request

from gregor.client.connection import (
    BrokerConnection,
    BrokerUnavailable,
    ClientSettings,
    bootstrap_connection,
    parse_bootstrap,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity

log = logging.getLogger(__name__)

GROUP_ID = "schema-registry"
PROTOCOL_TYPE = "sr"
PROTOCOL_NAME = "v0"
SESSION_TIMEOUT = datetime.timedelta(seconds=6)
"""Kafka's smallest allowed session (group.min.session.timeout.ms): how long writes
wait for a new primary when one dies."""
HEARTBEAT_S = 1.0
_RETRY_S = 0.5


@dataclass(frozen=True, slots=True)
class Primary:
    member_id: str
    url: str


class PrimaryElection:
    """This instance's membership of the group; ``primary`` is who writes now (None
    during a rebalance). ``on_elected`` runs before this instance starts answering
    writes as the primary."""

    def __init__(self, bootstrap: str, url: str, on_elected: Callable[[], None],
                 group_id: str = GROUP_ID, security: ChannelSecurity | None = None) -> None:
        """``security``: the TLS and SASL the registry's Kafka clients use (see
        :func:`gregor.client.connection.client_security`)."""
        self.settings = ClientSettings(parse_bootstrap(bootstrap), client_id="gregor-schemas",
                                       security=security)
        self.url = url
        self.on_elected = on_elected
        self.group_id = group_id
        self.member_id = ""
        self.generation = -1
        self.changed = threading.Condition()
        self.primary: Primary | None = None
        self._stop = threading.Event()
        self._coordinator: BrokerConnection | None = None
        self._thread = threading.Thread(target=self._run, name="primary-election",
                                        daemon=True)

    @property
    def is_primary(self) -> bool:
        return self.primary is not None and self.primary.member_id == self.member_id

    def start(self) -> None:
        self._thread.start()

    def wait_for_primary(self, timeout: float, not_this: Primary | None = None,
                         ) -> Primary | None:
        """The primary once one is elected (other than ``not_this``, one that stopped
        answering), or None after ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.primary is not None and self.primary != not_this, timeout)
            return self.primary if self.primary != not_this else None

    def close(self) -> None:
        """Leave the group, so that the others elect a primary at once rather than after
        the session timeout."""
        self._stop.set()
        self._thread.join()
        if self._coordinator is not None and self.member_id:
            with contextlib.suppress(BrokerUnavailable):
                self._coordinator.request(ApiKey.LEAVE_GROUP, 3, build(
                    leave_group_request.LeaveGroupRequest, group_id=self.group_id,
                    members=(build(leave_group_request.MemberIdentity,
                                   member_id=self.member_id, group_instance_id=None),)))
            self._coordinator.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._join_and_sync()
                while not self._stop.wait(HEARTBEAT_S) and self._heartbeat():
                    pass
            except BrokerUnavailable as exc:
                log.info("schema registry group: %s; finding the coordinator again", exc)
                self._disconnect()
                self._stop.wait(_RETRY_S)
            except Exception:
                log.exception("schema registry group member failed; rejoining")
                self._disconnect()
                self._stop.wait(_RETRY_S)

    def _set_primary(self, primary: Primary | None) -> None:
        if primary is not None and primary.member_id == self.member_id:
            self.on_elected()
        with self.changed:
            self.primary = primary
            self.changed.notify_all()

    def _join_and_sync(self) -> None:
        self._set_primary(None)
        identity = json.dumps({"version": 2, "url": self.url,
                               "master_eligibility": True}).encode()
        while not self._stop.is_set():
            answer = self._request(ApiKey.JOIN_GROUP, 5, build(
                join_group_request.JoinGroupRequest, group_id=self.group_id,
                session_timeout=SESSION_TIMEOUT, rebalance_timeout=SESSION_TIMEOUT,
                member_id=self.member_id, group_instance_id=None,
                protocol_type=PROTOCOL_TYPE,
                protocols=(build(join_group_request.JoinGroupRequestProtocol,
                                 name=PROTOCOL_NAME, metadata=identity),)))
            error = ErrorCode(answer.error_code)
            if error == ErrorCode.member_id_required:
                self.member_id = answer.member_id
                continue
            if error == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if error != ErrorCode.none:
                self._retry(error)
                continue
            self.member_id, self.generation = answer.member_id, int(answer.generation_id)
            assignments: tuple[Any, ...] = ()
            if answer.leader == self.member_id:
                assignment = self._choose(answer.members)
                assignments = tuple(build(sync_group_request.SyncGroupRequestAssignment,
                                          member_id=m.member_id, assignment=assignment)
                                    for m in answer.members)
            synced = self._request(ApiKey.SYNC_GROUP, 3, build(
                sync_group_request.SyncGroupRequest, group_id=self.group_id,
                generation_id=answer.generation_id, member_id=self.member_id,
                group_instance_id=None, assignments=assignments))
            if ErrorCode(synced.error_code) != ErrorCode.none:
                self._retry(ErrorCode(synced.error_code))
                continue
            chosen = json.loads(synced.assignment)
            self._set_primary(Primary(chosen["master"], chosen["master_url"]))
            log.info("schema registry primary: %s%s", chosen["master_url"],
                     " (this instance)" if self.is_primary else "")
            return

    @staticmethod
    def _choose(members: tuple[Any, ...]) -> bytes:
        """The group leader's choice, the same for every member: the eligible member
        with the lowest URL, so that a restarted group settles on the same one."""
        eligible = sorted((json.loads(m.metadata)["url"], m.member_id) for m in members
                          if json.loads(m.metadata).get("master_eligibility", True))
        url, member_id = eligible[0]
        return json.dumps({"master": member_id, "master_url": url, "error": 0}).encode()

    def _heartbeat(self) -> bool:
        """True while the generation stands; False to rejoin."""
        answer = self._request(ApiKey.HEARTBEAT, 3, build(
            heartbeat_request.HeartbeatRequest, group_id=self.group_id,
            generation_id=self.generation, member_id=self.member_id, group_instance_id=None))
        error = ErrorCode(answer.error_code)
        if error in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self.member_id = "" if error == ErrorCode.unknown_member_id else self.member_id
        elif error != ErrorCode.none and error != ErrorCode.rebalance_in_progress:
            self._retry(error)
        return error == ErrorCode.none

    def _retry(self, error: ErrorCode) -> None:
        if error in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                     ErrorCode.coordinator_load_in_progress):
            raise BrokerUnavailable(f"group coordinator: {error.name}")
        log.info("schema registry group: %s, retrying", error.name)
        time.sleep(_RETRY_S)

    def _request(self, api_key: ApiKey, version: int, body: Any) -> Any:
        if self._coordinator is None:
            connection = bootstrap_connection(self.settings)
            try:
                found = connection.request(ApiKey.FIND_COORDINATOR, 3, build(
                    find_coordinator_request.FindCoordinatorRequest, key=self.group_id,
                    key_type=0))
            finally:
                connection.close()
            if ErrorCode(found.error_code) != ErrorCode.none:
                raise BrokerUnavailable(f"FindCoordinator: {ErrorCode(found.error_code).name}")
            self._coordinator = BrokerConnection((found.host, int(found.port)), self.settings)
        return self._coordinator.request(api_key, version, body)

    def _disconnect(self) -> None:
        self._set_primary(None)
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
