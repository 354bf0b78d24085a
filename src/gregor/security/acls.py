"""ACLs and the authorizer's rules, as Kafka's AclAuthorizer (ZooKeeper mode) has them.

An ACL allows or denies one principal (``User:alice``, or ``User:*``) from one host (or
``*``) one operation on the resources a pattern names: a literal name (``*`` for every
resource of the type) or a prefix. A request is authorized when the principal is a
super user, or when no matching ACL denies it and one allows it; a resource no ACL
names at all is open exactly when ``allow.everyone.if.no.acl.found`` is true. READ,
WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.

The codes are the protocol's (CreateAcls, DescribeAcls, DeleteAcls); the names are the
ones Kafka writes into ZooKeeper (``"operation":"Read"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum

from gregor.config import BrokerConfig, ConfigError

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
# authorizer.class.name values that switch the authorizer on (Kafka's, old and new).
AUTHORIZERS = frozenset({
    "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "gregor"})


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# Kafka's names in ZooKeeper and in kafka-acls.sh: CamelCase.
RESOURCE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
                  ResourceType.CLUSTER: "Cluster",
                  ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                  ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"}
OPERATION_NAMES = {op: "".join(part.capitalize() for part in op.name.split("_"))
                   for op in Operation if op >= Operation.ALL}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}

_IMPLIED = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def names(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this ACL's pattern covers the resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def invalid_reason(self) -> str | None:
        """Why CreateAcls refuses this binding (Kafka's checks), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return "Invalid resource type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "Invalid pattern type: only LITERAL and PREFIXED ACLs can be created"
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            return "Invalid operation"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "Invalid permission type"
        if not self.resource_name:
            return "Resource name must not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            return f"Could not parse principal from `{self.principal}`"
        return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: ANY (and None names) match everything; a
    MATCH pattern matches every ACL that would apply to the resource named."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not acl.names(acl.resource_type,
                                                                self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


class Authorizer:
    """Decides every request's checks from the ACLs ``acls`` returns at that moment."""

    def __init__(self, acls: Callable[[], Iterable[AclBinding]], super_users: Iterable[str],
                 allow_if_no_acl: bool) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [acl for acl in self._acls() if acl.names(resource_type, name)]
        if not matching:
            return self.allow_if_no_acl
        mine = [acl for acl in matching if acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD)]
        if any(acl.permission == Permission.DENY and acl.operation in (operation, Operation.ALL)
               for acl in mine):
            return False
        allowing = (operation, Operation.ALL, *_IMPLIED.get(operation, ()))
        return any(acl.permission == Permission.ALLOW and acl.operation in allowing
                   for acl in mine)

    def authorize_any(self, principal: str, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (KIP-679:
        an idempotent producer needs WRITE on any topic): an ACL allows it somewhere and
        none denies it on every resource of the type."""
        if principal in self.super_users:
            return True
        mine = [acl for acl in self._acls() if acl.resource_type == resource_type
                and acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD) and acl.operation in (operation, Operation.ALL)]
        if any(acl.permission == Permission.DENY and acl.pattern_type == PatternType.LITERAL
               and acl.resource_name == WILDCARD for acl in mine):
            return False
        return any(acl.permission == Permission.ALLOW for acl in mine)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str, operations: Iterable[Operation]) -> int:
        """The bit set Metadata and DescribeCluster report (bit i: operation code i)."""
        return sum(1 << op for op in operations
                   if self.authorize(principal, host, op, resource_type, name))


def authorizer_enabled(config: BrokerConfig) -> bool:
    name = config["authorizer.class.name"].strip()
    if name and name not in AUTHORIZERS:
        raise ConfigError(f"authorizer.class.name {name}: gregor's authorizer answers to "
                          f"{', '.join(sorted(AUTHORIZERS))}")
    return bool(name)


def super_users(config: BrokerConfig) -> list[str]:
    return [item.strip() for item in config["super.users"].split(";") if item.strip()]
