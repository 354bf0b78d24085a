"""The group coordinator's request families, added to the router by the broker."""

from __future__ import annotations

from gregor.broker import group_admin, group_find_coordinator, group_membership, group_offsets
from gregor.broker.router import Route, Router
from gregor.protocol.api_keys import ApiKey

ROUTES: dict[int, Route] = {
    ApiKey.FIND_COORDINATOR: Route(group_find_coordinator.handle, 0, 4),
    ApiKey.JOIN_GROUP: Route(group_membership.handle_join, 0, 9),
    ApiKey.SYNC_GROUP: Route(group_membership.handle_sync, 0, 5),
    ApiKey.HEARTBEAT: Route(group_membership.handle_heartbeat, 0, 4),
    ApiKey.LEAVE_GROUP: Route(group_membership.handle_leave, 0, 5),
    ApiKey.OFFSET_COMMIT: Route(group_offsets.handle_commit, 2, 8),
    ApiKey.OFFSET_FETCH: Route(group_offsets.handle_fetch, 1, 8),
    ApiKey.OFFSET_DELETE: Route(group_offsets.handle_delete, 0, 0),
    ApiKey.DESCRIBE_GROUPS: Route(group_admin.handle_describe, 0, 6),
    ApiKey.LIST_GROUPS: Route(group_admin.handle_list, 0, 5),
    ApiKey.DELETE_GROUPS: Route(group_admin.handle_delete, 0, 2),
}


def register(router: Router) -> None:
    for api_key, route in ROUTES.items():
        router.add(api_key, route)
