"""The checks handlers make, as Kafka's KafkaApis makes them: one question to the
authorizer per resource, answered yes at once when no authorizer is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker


def allowed(broker: Broker, request: Request, operation: Operation,
            resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(
        str(request.session.principal), request.client_host, operation, resource_type, name)


def topic_allowed(broker: Broker, request: Request, operation: Operation, topic: str) -> bool:
    return allowed(broker, request, operation, ResourceType.TOPIC, topic)


def may_fetch(broker: Broker, request: Request, replica_id: int, topic: str) -> bool:
    """A follower (``replica_id`` >= 0) needs CLUSTER_ACTION on the cluster, a consumer
    READ on the topic."""
    if replica_id >= 0:
        return allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    return topic_allowed(broker, request, Operation.READ, topic)


def transactional_refusal(broker: Broker, request: Request) -> tuple[ErrorCode, str] | None:
    """A transactional request needs WRITE on its transactional id, or every partition
    is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    transactional_id = getattr(request.body, "transactional_id", None)
    if transactional_id is None or transactional_id_allowed(broker, request, transactional_id):
        return None
    return (ErrorCode.transactional_id_authorization_failed,
            "Transactional Id authorization failed.")


def may_create_topic(broker: Broker, request: Request, topic: str) -> bool:
    """CREATE on the cluster, or on the topic (Kafka accepts either)."""
    return (allowed(broker, request, Operation.CREATE, ResourceType.CLUSTER)
            or topic_allowed(broker, request, Operation.CREATE, topic))


def group_allowed(broker: Broker, request: Request, operation: Operation, group: str) -> bool:
    return allowed(broker, request, operation, ResourceType.GROUP, group)


def may_write_idempotently(broker: Broker, request: Request) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679)."""
    authorizer = broker.authorizer
    return authorizer is None or allowed(
        broker, request, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER) or (
        authorizer.authorize_any(str(request.session.principal), request.client_host,
                                 Operation.WRITE, ResourceType.TOPIC))


def transactional_id_allowed(broker: Broker, request: Request, transactional_id: str) -> bool:
    return allowed(broker, request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   transactional_id)
