"""``gregor acls``: add, list and remove ACLs as ``kafka-acls.sh`` does, with the Kafka
admin API (CreateAcls, DescribeAcls, DeleteAcls)."""

from __future__ import annotations

import argparse
from typing import cast

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.cluster_metadata import cluster_metadata
from gregor.cli.errors import CliError, admin_result

_CLUSTER = "kafka-cluster"
_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    acls = subparsers.add_parser("acls", help="add, list, remove ACLs (kafka-acls.sh)")
    actions = acls.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="allow or deny principals operations on a resource")
    remove = actions.add_parser("remove", help="remove the ACLs matching the options")
    listing = actions.add_parser("list", help="list ACLs (all, or those of a resource)")
    for parser in (add, remove, listing):
        resource = parser.add_mutually_exclusive_group(required=parser is not listing)
        resource.add_argument("--topic")
        resource.add_argument("--group")
        resource.add_argument("--transactional-id")
        resource.add_argument("--cluster", action="store_true")
        parser.add_argument("--resource-pattern-type", default=None,
                            choices=["literal", "prefixed", "any", "match"],
                            help="literal (default for add) or prefixed names")
        add_client_arguments(parser)
    for parser in (add, remove):
        parser.add_argument("--allow-principal", action="append", default=[],
                            metavar="User:NAME")
        parser.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        parser.add_argument("--operation", action="append", default=[],
                            choices=sorted(_OPERATIONS), type=str.lower,
                            help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                                 "DescribeConfigs, AlterConfigs, IdempotentWrite, All "
                                 "(repeatable)")
        parser.add_argument("--host", default="*", help="the client host (default: any)")
    listing.add_argument("--principal", help="only this principal's ACLs")
    add.set_defaults(run=run_add)
    remove.set_defaults(run=run_remove)
    listing.set_defaults(run=run_list)


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.BROKER, _CLUSTER
    return ResourceType.ANY, None


def _any(value: str | None) -> str:
    """None matches any value in a filter, as confluent-kafka documents it (its type
    hints say str)."""
    return cast(str, value)


def _pattern(args: argparse.Namespace, default: str) -> ResourcePatternType:
    return ResourcePatternType[(args.resource_pattern_type or default).upper()]


def _entries(args: argparse.Namespace) -> list[tuple[str, AclPermissionType, AclOperation]]:
    if not args.allow_principal and not args.deny_principal:
        raise CliError("name at least one --allow-principal or --deny-principal")
    if not args.operation:
        raise CliError("name at least one --operation")
    return [(principal, permission, _OPERATIONS[op])
            for principals, permission in ((args.allow_principal, AclPermissionType.ALLOW),
                                           (args.deny_principal, AclPermissionType.DENY))
            for principal in principals for op in args.operation]


def _admin(args: argparse.Namespace) -> AdminClient:
    config, watch = client_config(args)
    admin = AdminClient(config)
    cluster_metadata(admin, watch)
    return admin


def run_add(args: argparse.Namespace) -> int:
    kind, name = _resource(args)
    assert name is not None
    bindings = [AclBinding(kind, name, _pattern(args, "literal"), principal, args.host, op,
                           permission) for principal, permission, op in _entries(args)]
    admin = _admin(args)
    for future in admin.create_acls(bindings).values():
        admin_result(future, "add the ACL")
    print(f"Added {len(bindings)} ACL(s).")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    kind, name = _resource(args)
    filters = [AclBindingFilter(kind, _any(name), _pattern(args, "literal"), principal, args.host,
                                op, permission) for principal, permission, op in _entries(args)]
    admin = _admin(args)
    removed = sum(len(admin_result(future, "remove ACLs"))
                  for future in admin.delete_acls(filters).values())
    print(f"Removed {removed} ACL(s).")
    return 0


def run_list(args: argparse.Namespace) -> int:
    kind, name = _resource(args)
    acl_filter = AclBindingFilter(kind, _any(name),
                                  _pattern(args, "any" if name is None else "match"),
                                  _any(args.principal), _any(None), AclOperation.ANY,
                                  AclPermissionType.ANY)
    admin = _admin(args)
    for acl in sorted(admin_result(admin.describe_acls(acl_filter), "list ACLs"), key=str):
        kind_name = "Cluster" if acl.restype == ResourceType.BROKER else acl.restype.name.title()
        print(f"{kind_name}:{acl.resource_pattern_type.name}:{acl.name}\t{acl.principal}\t"
              f"{acl.host}\t{acl.operation.name}\t{acl.permission_type.name}")
    return 0
