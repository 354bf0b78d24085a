"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): the SCRAM users
behind ``kafka-configs.sh --entity-type users``, confluent-kafka's
``describe/alter_user_scram_credentials`` and ``gregor users``.

The client sends a salt and the salted password (never the password); the broker
derives and stores the stored and server keys, in the users' entity configs
(ZooKeeper's ``/config/users`` in a cluster). Errors are Kafka's, per user: a user with
one bad alteration gets none of its alterations applied.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security import scram
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
_CLUSTER_DENIED = "Cluster authorization failed."


async def handle_describe(broker: Broker, request: Request):
    key, version = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.version
    result_cls = nested(key, version, "DescribeUserScramCredentialsResult")
    info_cls = nested(key, version, "CredentialInfo")
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER):
        # Kafka's error response: the error at the top and on each user asked for.
        denied = ErrorCode.cluster_authorization_failed
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     error_code=denied, error_message=_CLUSTER_DENIED, results=tuple(
                         build(result_cls, user=u.name, error_code=denied,
                               error_message=_CLUSTER_DENIED, credential_infos=())
                         for u in request.body.users or ()))
    configs = broker.image.user_configs
    asked = [u.name for u in request.body.users or ()]
    counts = Counter(asked)
    names = asked or sorted(user for user, values in configs.items()
                            if any(m in values for m in scram.MECHANISMS))
    results = []
    for name in dict.fromkeys(names):
        infos = []
        for mechanism, text in sorted(configs.get(name, {}).items()):
            if mechanism in scram.MECHANISMS:
                try:
                    iterations = scram.ScramCredential.decode(text).iterations
                except (ValueError, KeyError):
                    continue
                infos.append(build(info_cls, mechanism=scram.mechanism_code(mechanism),
                                   iterations=iterations))
        error, message = ErrorCode.none, None
        if counts[name] > 1:
            error, message = (ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials "
                              f"for the same user twice in a single request: {name}")
        elif not infos:
            error, message = (ErrorCode.resource_not_found,
                              f"Attempt to describe a user credential that does not exist: "
                              f"{name}")
        results.append(build(result_cls, user=name, error_code=error, error_message=message,
                             credential_infos=tuple(infos) if error == ErrorCode.none else ()))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 error_code=ErrorCode.none, error_message=None, results=tuple(results))


async def handle_alter(broker: Broker, request: Request):
    key, version = ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.version
    result_cls = nested(key, version, "AlterUserScramCredentialsResult")
    body = request.body
    users = list(dict.fromkeys([d.name for d in body.deletions]
                               + [u.name for u in body.upsertions]))
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    changes: dict[str, dict[str, str | None]] = {name: {} for name in users}
    seen: set[tuple[str, int]] = set()
    may_alter = allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER)
    for item in (*body.deletions, *body.upsertions):
        failure = (_check(item, seen, broker.image.user_configs) if may_alter
                   else (ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED))
        if failure is not None:
            errors.setdefault(item.name, failure)
            continue
        mechanism = scram.mechanism_name(item.mechanism)
        assert mechanism is not None
        if hasattr(item, "salted_password"):
            changes[item.name][mechanism] = scram.ScramCredential.from_salted_password(
                mechanism, item.salted_password, item.salt, item.iterations).encode()
        else:
            changes[item.name][mechanism] = None
    valid = {name: user_changes for name, user_changes in changes.items()
             if name not in errors and user_changes}
    if valid:
        await broker.user_configs.alter(valid)
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, results=tuple(
        build(result_cls, user=name, error_code=errors.get(name, (ErrorCode.none, None))[0],
              error_message=errors.get(name, (ErrorCode.none, None))[1])
        for name in users))


def _check(item: Any, seen: set[tuple[str, int]], configs: dict[str, dict[str, str]]
           ) -> tuple[ErrorCode, str | None] | None:
    """Kafka's reasons to refuse one deletion or upsertion, or None."""
    if not item.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mechanism = scram.mechanism_name(item.mechanism)
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if (item.name, item.mechanism) in seen:
        return (ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request")
    seen.add((item.name, item.mechanism))
    if not hasattr(item, "salted_password"):
        if mechanism not in configs.get(item.name, {}):
            return (ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist")
        return None
    if item.iterations < scram.MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if item.iterations > scram.MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if not item.salt or not item.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None
