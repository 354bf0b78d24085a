"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: a member's life in a classic group.

Handlers translate between kio messages and the coordinator; the protocol rules
live in :mod:`gregor.groups.coordinator`.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import group_allowed
from gregor.broker.request import Request
from gregor.groups.coordinator import JoinRequest
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
# JoinGroup v4+ clients expect MEMBER_ID_REQUIRED for their first join (KIP-394).
_FIRST_KNOWN_MEMBER_ID_VERSION = 4
# JoinGroup's protocol name became nullable in v7; before, an unknown one is "".
_FIRST_NULLABLE_PROTOCOL_NAME_VERSION = 7
_FIRST_BATCH_LEAVE_VERSION = 3


def milliseconds(value: datetime.timedelta) -> int:
    return int(value / datetime.timedelta(milliseconds=1))


def client_host(request: Request) -> str:
    """The member host as Kafka reports it (Java's InetAddress.toString: "/1.2.3.4")."""
    return f"/{request.client_host}"


async def handle_join(broker: Broker, request: Request):
    body = request.body
    version = request.version
    if not group_allowed(broker, request, Operation.READ, body.group_id):
        return build(response_schema(ApiKey.JOIN_GROUP, version), throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                     protocol_type=None, protocol_name=None if version >= 7 else "",
                     leader="", skip_assignment=False, member_id=body.member_id, members=())
    session_timeout = milliseconds(body.session_timeout)
    # v0 has no rebalance timeout: the session timeout bounds the join phase too.
    rebalance_timeout = getattr(body, "rebalance_timeout", None)
    result = await broker.group_coordinator.join_group(JoinRequest(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.header.client_id or "", client_host=client_host(request),
        session_timeout_ms=session_timeout,
        rebalance_timeout_ms=(session_timeout if rebalance_timeout is None
                              else milliseconds(rebalance_timeout)),
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in body.protocols),
        require_known_member_id=version >= _FIRST_KNOWN_MEMBER_ID_VERSION))
    protocol_name = result.protocol_name
    if version < _FIRST_NULLABLE_PROTOCOL_NAME_VERSION:
        protocol_name = protocol_name or ""
    member_cls = nested(ApiKey.JOIN_GROUP, version, "JoinGroupResponseMember")
    return build(
        response_schema(ApiKey.JOIN_GROUP, version), throttle_time=_NO_THROTTLE,
        error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name,
        leader=result.leader_id, skip_assignment=False, member_id=result.member_id,
        members=tuple(build(member_cls, member_id=member_id, group_instance_id=instance_id,
                            metadata=metadata)
                      for member_id, instance_id, metadata in result.members))


async def handle_sync(broker: Broker, request: Request):
    body = request.body
    if not group_allowed(broker, request, Operation.READ, body.group_id):
        return build(response_schema(ApiKey.SYNC_GROUP, request.version),
                     throttle_time=_NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                     protocol_type=None, protocol_name=None, assignment=b"")
    result = await broker.group_coordinator.sync_group(
        body.group_id, body.generation_id, body.member_id,
        getattr(body, "group_instance_id", None), getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None),
        {a.member_id: a.assignment for a in body.assignments})
    return build(response_schema(ApiKey.SYNC_GROUP, request.version), throttle_time=_NO_THROTTLE,
                 error_code=result.error, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name, assignment=result.assignment)


async def handle_heartbeat(broker: Broker, request: Request):
    body = request.body
    error = ErrorCode.group_authorization_failed
    if group_allowed(broker, request, Operation.READ, body.group_id):
        error = broker.group_coordinator.heartbeat(
            body.group_id, body.generation_id, body.member_id,
            getattr(body, "group_instance_id", None))
    return build(response_schema(ApiKey.HEARTBEAT, request.version), throttle_time=_NO_THROTTLE,
                 error_code=error)


async def handle_leave(broker: Broker, request: Request):
    body = request.body
    version = request.version
    if version >= _FIRST_BATCH_LEAVE_VERSION:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    if group_allowed(broker, request, Operation.READ, body.group_id):
        error, member_errors = broker.group_coordinator.leave_group(body.group_id, leaving)
    else:
        error, member_errors = ErrorCode.group_authorization_failed, []
    schema = response_schema(ApiKey.LEAVE_GROUP, version)
    if version < _FIRST_BATCH_LEAVE_VERSION:
        # One member, one error: before v3 the member's own error is the response's.
        if error == ErrorCode.none and member_errors:
            error = member_errors[0]
        return build(schema, throttle_time=_NO_THROTTLE, error_code=error)
    member_cls = nested(ApiKey.LEAVE_GROUP, version, "MemberResponse")
    return build(schema, throttle_time=_NO_THROTTLE, error_code=error, members=tuple(
        build(member_cls, member_id=member_id, group_instance_id=instance_id, error_code=code)
        for (member_id, instance_id), code in zip(leaving, member_errors, strict=False)))
