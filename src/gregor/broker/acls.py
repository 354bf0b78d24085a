"""DescribeAcls, CreateAcls and DeleteAcls.

Without an authorizer (``authorizer.class.name`` unset, its default) every call fails
with SECURITY_DISABLED, as in Kafka, and admin clients (``kafka-acls.sh``,
confluent-kafka's ``describe_acls``) say "no authorizer" in those words. With one, the
ACLs are kept in the metadata (ZooKeeper's ``/kafka-acl`` in a cluster) and changing
them needs ALTER on the cluster, reading them DESCRIBE, as Kafka checks.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
# Kafka's own words (KafkaApis), which clients show.
_NO_AUTHORIZER = "No Authorizer is configured on the broker"
_CLUSTER_DENIED = "Cluster authorization failed."


def _filter(item: Any) -> AclFilter | None:
    """A Describe or Delete filter; None when it names a code that does not exist."""
    try:
        return AclFilter(ResourceType(item.resource_type_filter), item.resource_name_filter,
                         PatternType(item.pattern_type_filter), item.principal_filter,
                         item.host_filter, Operation(item.operation),
                         Permission(item.permission_type))
    except ValueError:
        return None


def _binding(item: Any) -> AclBinding | None:
    try:
        return AclBinding(ResourceType(item.resource_type), item.resource_name,
                          PatternType(item.resource_pattern_type), item.principal, item.host,
                          Operation(item.operation), Permission(item.permission_type))
    except ValueError:
        return None


async def handle_describe(broker: Broker, request: Request):
    key, version = ApiKey.DESCRIBE_ACLS, request.version
    schema = response_schema(key, version)
    if broker.authorizer is None:
        return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.security_disabled,
                     error_message=_NO_AUTHORIZER, resources=())
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER):
        return build(schema, throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message=_CLUSTER_DENIED, resources=())
    acl_filter = _filter(request.body)
    if acl_filter is None:
        return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                     error_message="unknown code in the ACL filter", resources=())
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in sorted(broker.image.acls, key=str):
        if acl_filter.matches(acl):
            by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                                   []).append(acl)
    resource_cls = nested(key, version, "DescribeAclsResource")
    description_cls = nested(key, version, "AclDescription")
    resources = tuple(
        build(resource_cls, resource_type=kind, resource_name=name, pattern_type=pattern,
              acls=tuple(build(description_cls, principal=acl.principal, host=acl.host,
                               operation=acl.operation, permission_type=acl.permission)
                         for acl in acls))
        for (kind, name, pattern), acls in sorted(by_resource.items()))
    return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, resources=resources)


def _alter_refusal(broker: Broker, request: Request) -> tuple[ErrorCode, str] | None:
    """Why CreateAcls or DeleteAcls is refused, if it is: no authorizer, or no ALTER on
    the cluster."""
    if broker.authorizer is None:
        return ErrorCode.security_disabled, _NO_AUTHORIZER
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER):
        return ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED
    return None


async def handle_create(broker: Broker, request: Request):
    key, version = ApiKey.CREATE_ACLS, request.version
    result_cls = nested(key, version, "AclCreationResult")
    creations = request.body.creations
    refusal = _alter_refusal(broker, request)
    if refusal is not None:
        error, message = refusal
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     results=tuple(build(result_cls, error_code=error, error_message=message)
                                   for _ in creations))
    results, valid = [], []
    for item in creations:
        acl = _binding(item)
        reason = "unknown code in the ACL" if acl is None else acl.invalid_reason()
        if reason is not None or acl is None:
            results.append(build(result_cls, error_code=ErrorCode.invalid_request,
                                 error_message=reason))
            continue
        valid.append(acl)
        results.append(build(result_cls, error_code=ErrorCode.none, error_message=None))
    if valid:
        await broker.acl_store.change(valid, ())
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 results=tuple(results))


async def handle_delete(broker: Broker, request: Request):
    key, version = ApiKey.DELETE_ACLS, request.version
    result_cls = nested(key, version, "DeleteAclsFilterResult")
    filters = request.body.filters
    refusal = _alter_refusal(broker, request)
    if refusal is not None:
        error, message = refusal
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     filter_results=tuple(build(result_cls, error_code=error,
                                                error_message=message, matching_acls=())
                                          for _ in filters))
    matching_cls = nested(key, version, "DeleteAclsMatchingAcl")
    results, removed = [], set()
    for item in filters:
        acl_filter = _filter(item)
        if acl_filter is None:
            results.append(build(result_cls, error_code=ErrorCode.invalid_request,
                                 error_message="unknown code in the ACL filter",
                                 matching_acls=()))
            continue
        matched = sorted((acl for acl in broker.image.acls if acl_filter.matches(acl)), key=str)
        removed.update(matched)
        results.append(build(result_cls, error_code=ErrorCode.none, error_message=None,
                             matching_acls=tuple(build(
                                 matching_cls, error_code=ErrorCode.none, error_message=None,
                                 resource_type=acl.resource_type,
                                 resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                                 principal=acl.principal, host=acl.host,
                                 operation=acl.operation, permission_type=acl.permission)
                                 for acl in matched)))
    if removed:
        await broker.acl_store.change((), removed)
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 filter_results=tuple(results))
