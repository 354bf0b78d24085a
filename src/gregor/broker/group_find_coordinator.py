"""FindCoordinator: every group's coordinator is the leader of its __consumer_offsets
partition, every transactional id's the leader of its __transaction_state partition.

The first lookup creates the topic, as in Kafka, so a broker whose clients never
use groups or transactions carries none of its partitions.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.cluster.znodes import BrokerRegistration
from gregor.groups.offsets_store import StoreError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType
from gregor.transactions.state_log import StateLogError

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.FIND_COORDINATOR
_GROUP_KEY_TYPE = 0
_TRANSACTION_KEY_TYPE = 1


async def _lookup(broker: Broker, request: Request, key_type: int, key: str) -> dict:
    """Fields of one answer: the coordinator's address, or an error with no node."""
    listener = request.session.listener
    error, message = ErrorCode.none, None
    resource = (ResourceType.TRANSACTIONAL_ID if key_type == _TRANSACTION_KEY_TYPE
                else ResourceType.GROUP)
    if not allowed(broker, request, Operation.DESCRIBE, resource, key):
        error = (ErrorCode.transactional_id_authorization_failed
                 if resource == ResourceType.TRANSACTIONAL_ID
                 else ErrorCode.group_authorization_failed)
        return {"error_code": error, "error_message": None, "node_id": -1, "host": "",
                "port": -1}
    if key_type == _TRANSACTION_KEY_TYPE:
        return await _transaction_coordinator(broker, key, listener)
    if key_type != _GROUP_KEY_TYPE:
        error, message = ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
    else:
        try:
            await broker.group_coordinator.store.ensure_topic()
        except StoreError as exc:
            error, message = exc.error, str(exc)
    coordinator = None
    if error == ErrorCode.none:
        coordinator = broker.group_coordinator.store.coordinator_for(key)
        if coordinator is None:
            error = ErrorCode.coordinator_not_available
            message = "the group's partition has no leader"
    if coordinator is None:
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "",
                "port": -1}
    return _answer(coordinator, listener)


async def _transaction_coordinator(broker: Broker, transactional_id: str, listener: str
                                   ) -> dict:
    coordinator = broker.transaction_coordinator
    error, message, node = ErrorCode.none, None, None
    try:
        await coordinator.ensure_state_log()
    except StateLogError as exc:
        error, message = exc.error, str(exc)
    else:
        node = coordinator.state_log.coordinator_for(transactional_id)
        if node is None:
            error, message = (ErrorCode.coordinator_not_available,
                              "the transactional id's partition has no leader")
    if node is None:
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "",
                "port": -1}
    return _answer(node, listener)


def _answer(node: BrokerRegistration, listener: str) -> dict:
    """The coordinator as clients of ``listener`` reach it (as Kafka, not available when
    it has no such listener)."""
    endpoint = node.endpoint(listener)
    if endpoint is None:
        return {"error_code": ErrorCode.coordinator_not_available,
                "error_message": f"the coordinator has no listener {listener}", "node_id": -1,
                "host": "", "port": -1}
    return {"error_code": ErrorCode.none, "error_message": None, "node_id": node.broker_id,
            "host": endpoint[0], "port": endpoint[1]}


async def handle(broker: Broker, request: Request):
    body = request.body
    version = request.version
    key_type = getattr(body, "key_type", _GROUP_KEY_TYPE)
    schema = response_schema(_KEY, version)
    if version >= 4:
        coordinator_cls = nested(_KEY, version, "Coordinator")
        coordinators = [build(coordinator_cls, key=key,
                              **await _lookup(broker, request, key_type, key))
                        for key in body.coordinator_keys]
        return build(schema, throttle_time=datetime.timedelta(0),
                     coordinators=tuple(coordinators))
    return build(schema, throttle_time=datetime.timedelta(0),
                 **await _lookup(broker, request, key_type, body.key))
