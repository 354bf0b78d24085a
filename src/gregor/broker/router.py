"""Router: one handler per API key, and the version ranges advertised in ApiVersions.

The table below is the single source of truth for what gregor implements: the
ApiVersions answer is derived from it, so the broker never advertises a version
it cannot serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.broker import (
    acls,
    api_versions,
    client_quotas,
    cluster_info,
    configs,
    describe_producers,
    elect_leaders,
    fetch,
    list_offsets,
    log_dirs,
    metadata,
    offset_for_leader_epoch,
    produce,
    producer_ids,
    reassignments,
    records_admin,
    sasl_requests,
    scram_credentials,
    topics,
)
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

Handler = Callable[["Broker", Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    min_version: int
    max_version: int
    # Versions inside the advertised range that are refused: Produce v0-2 must be
    # advertised (librdkafka checks for it, KAFKA-18659) but, as in Kafka 4, is not served.
    decodable_from: int | None = None


ROUTES: dict[int, Route] = {
    ApiKey.PRODUCE: Route(produce.handle, 0, 9, decodable_from=3),
    ApiKey.FETCH: Route(fetch.handle, 4, 12),
    ApiKey.LIST_OFFSETS: Route(list_offsets.handle, 1, 7),
    ApiKey.METADATA: Route(metadata.handle, 0, 12),
    ApiKey.API_VERSIONS: Route(api_versions.handle, 0, 4),
    ApiKey.CREATE_TOPICS: Route(topics.handle_create_topics, 2, 7),
    ApiKey.DELETE_TOPICS: Route(topics.handle_delete_topics, 1, 6),
    ApiKey.DELETE_RECORDS: Route(records_admin.handle, 0, 2),
    ApiKey.INIT_PRODUCER_ID: Route(producer_ids.handle, 0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Route(offset_for_leader_epoch.handle, 2, 4),
    ApiKey.DESCRIBE_ACLS: Route(acls.handle_describe, 1, 3),
    ApiKey.CREATE_ACLS: Route(acls.handle_create, 1, 3),
    ApiKey.DELETE_ACLS: Route(acls.handle_delete, 1, 3),
    ApiKey.DESCRIBE_CONFIGS: Route(configs.handle_describe, 1, 4),
    ApiKey.ALTER_CONFIGS: Route(configs.handle_alter, 0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: Route(log_dirs.handle_alter, 1, 2),
    ApiKey.DESCRIBE_LOG_DIRS: Route(log_dirs.handle_describe, 1, 4),
    ApiKey.CREATE_PARTITIONS: Route(topics.handle_create_partitions, 0, 3),
    ApiKey.ELECT_LEADERS: Route(elect_leaders.handle, 0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Route(configs.handle_incremental_alter, 0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Route(reassignments.handle_alter, 0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Route(reassignments.handle_list, 0, 0),
    ApiKey.DESCRIBE_CLUSTER: Route(cluster_info.handle, 0, 1),
    ApiKey.DESCRIBE_PRODUCERS: Route(describe_producers.handle, 0, 0),
    ApiKey.SASL_HANDSHAKE: Route(sasl_requests.handle_handshake, 0, 1),
    ApiKey.SASL_AUTHENTICATE: Route(sasl_requests.handle_authenticate, 0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Route(client_quotas.handle_describe, 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: Route(client_quotas.handle_alter, 0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Route(scram_credentials.handle_describe, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Route(scram_credentials.handle_alter, 0, 0),
}


class Router:
    def __init__(self, routes: dict[int, Route] | None = None) -> None:
        self.routes = dict(ROUTES if routes is None else routes)

    def add(self, api_key: int, route: Route) -> None:
        """Register another API family (e.g. the group coordinator's)."""
        self.routes[api_key] = route

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        return {key: (r.min_version, r.max_version) for key, r in self.routes.items()}

    def route(self, api_key: int, version: int) -> Route | None:
        """The route for a request, or None if this API key or version is not served."""
        route = self.routes.get(api_key)
        if route is None or not route.min_version <= version <= route.max_version:
            return None
        if route.decodable_from is not None and version < route.decodable_from:
            return None
        return route
