"""DescribeGroups, ListGroups and DeleteGroups: what admin tools see of groups."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed, group_allowed
from gregor.broker.request import Request
from gregor.groups.group import Group, GroupState
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
_UNKNOWN_OPERATIONS = -(2**31)
# Without ACLs every operation a group supports is allowed: READ (3), DELETE (6), DESCRIBE (8).
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
# KIP-1043: from DescribeGroups v6 an unknown group is an error, not a "Dead" group.
_FIRST_GROUP_NOT_FOUND_VERSION = 6
# All groups here use the classic protocol (ListGroups v5 group types, KIP-848).
CLASSIC_GROUP_TYPE = "classic"


def _described(broker: Broker, request: Request, group_id: str):
    version = request.version
    operations = (_GROUP_OPERATIONS if getattr(request.body, "include_authorized_operations", False)
                  else _UNKNOWN_OPERATIONS)
    group_cls = nested(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroup")
    member_cls = nested(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroupMember")
    if not group_allowed(broker, request, Operation.DESCRIBE, group_id):
        return build(group_cls, error_code=ErrorCode.group_authorization_failed,
                     error_message=None, group_id=group_id, group_state="", protocol_type="",
                     protocol_data="", members=(), authorized_operations=operations)
    error, group = broker.group_coordinator.describe_group(group_id)
    if error == ErrorCode.none and group is None:
        if version >= _FIRST_GROUP_NOT_FOUND_VERSION:
            error = ErrorCode.group_id_not_found
        else:
            return build(group_cls, error_code=error, error_message=None, group_id=group_id,
                         group_state=GroupState.DEAD.value, protocol_type="", protocol_data="",
                         members=(), authorized_operations=operations)
    if error != ErrorCode.none or group is None:
        return build(group_cls, error_code=error, error_message=None, group_id=group_id,
                     group_state="", protocol_type="", protocol_data="", members=(),
                     authorized_operations=operations)
    # Like Kafka, only a Stable group shows its protocol, member metadata and assignments:
    # in any other state they are about to change.
    stable = group.is_in(GroupState.STABLE)
    members = tuple(
        build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
              client_id=m.client_id, client_host=m.client_host,
              member_metadata=m.metadata(group.protocol_name) if stable and group.protocol_name
              else b"",
              member_assignment=m.assignment if stable else b"")
        for m in group.members.values())
    return build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                 group_state=group.state.value, protocol_type=group.protocol_type or "",
                 protocol_data=(group.protocol_name or "") if stable else "",
                 members=members, authorized_operations=operations)


async def handle_describe(broker: Broker, request: Request):
    return build(response_schema(ApiKey.DESCRIBE_GROUPS, request.version),
                 throttle_time=_NO_THROTTLE,
                 groups=tuple(_described(broker, request, g) for g in request.body.groups))


def _listed(group: Group, states: set[str], types: set[str]) -> bool:
    return ((not states or group.state.value.lower() in states)
            and (not types or CLASSIC_GROUP_TYPE in types))


async def handle_list(broker: Broker, request: Request):
    version = request.version
    states = {s.lower() for s in getattr(request.body, "states_filter", ())}
    types = {t.lower() for t in getattr(request.body, "types_filter", ())}
    error, groups = broker.group_coordinator.list_groups()
    every = allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER)
    listed_cls = nested(ApiKey.LIST_GROUPS, version, "ListedGroup")
    return build(response_schema(ApiKey.LIST_GROUPS, version), throttle_time=_NO_THROTTLE,
                 error_code=error, groups=tuple(
                     build(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type or "",
                           group_state=g.state.value, group_type=CLASSIC_GROUP_TYPE)
                     for g in groups if _listed(g, states, types) and (
                         # As Kafka: all groups with DESCRIBE on the cluster, else those
                         # the client may describe.
                         every or group_allowed(broker, request, Operation.DESCRIBE,
                                                g.group_id))))


async def handle_delete(broker: Broker, request: Request):
    version = request.version
    result_cls = nested(ApiKey.DELETE_GROUPS, version, "DeletableGroupResult")
    coordinator = broker.group_coordinator
    return build(response_schema(ApiKey.DELETE_GROUPS, version), throttle_time=_NO_THROTTLE,
                 results=tuple(build(result_cls, group_id=g, error_code=(
                     coordinator.delete_group(g)
                     if group_allowed(broker, request, Operation.DELETE, g)
                     else ErrorCode.group_authorization_failed))
                     for g in request.body.groups_names))
