"""``gregor schemas``: list, describe, register, check and delete the schemas of a schema
registry, through confluent-kafka's own SchemaRegistryClient, so it works with any
registry that speaks Confluent's API (gregor's, Confluent's, Karapace, Redpanda's)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from gregor.cli.errors import CliError
from gregor.cli.groups_cmd import print_table

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
REGISTRY_ENV = "GREGOR_SCHEMA_REGISTRY"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    schemas = subparsers.add_parser(
        "schemas", help="list, describe, register, check and delete registry schemas")
    schemas.add_argument(
        "--registry", "-r", metavar="URL", default=os.environ.get(REGISTRY_ENV, DEFAULT_REGISTRY),
        help=f"the schema registry (default: ${REGISTRY_ENV} or {DEFAULT_REGISTRY})")
    actions = schemas.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="subjects, with their latest version")
    listing.add_argument("--prefix", default="", help="only subjects starting with this")
    listing.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="a subject's version: id, type, schema")
    describe.add_argument("subject")
    describe.add_argument("--version", default="latest", help="a number or latest (default)")
    describe.set_defaults(run=run_describe)

    for name, helped, run in (
            ("register", "register a schema under a subject; prints its id", run_register),
            ("check", "whether a schema is compatible with a subject (exit 1 if not)",
             run_check)):
        action = actions.add_parser(name, help=helped)
        action.add_argument("subject")
        action.add_argument("file", help="the schema's file, or - for standard input")
        action.add_argument("--type", default="AVRO", choices=("AVRO", "JSON", "PROTOBUF"),
                            help="the schema's type (default: AVRO)")
        action.add_argument("--reference", action="append", default=[],
                            metavar="NAME=SUBJECT:VERSION", help="a referenced schema")
        action.add_argument("--normalize", action="store_true",
                            help="normalize the schema first (same schema, same id)")
        if name == "check":
            action.add_argument("--version", default=None,
                                help="only against this version (default: every version "
                                     "the subject's compatibility level checks)")
        action.set_defaults(run=run)

    delete = actions.add_parser("delete", help="delete a subject or one of its versions")
    delete.add_argument("subject")
    delete.add_argument("--version", help="only this version (a number or latest)")
    delete.add_argument("--permanent", action="store_true",
                        help="delete for good what was soft-deleted before")
    delete.set_defaults(run=run_delete)


def _client(args: argparse.Namespace) -> Any:
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:
        raise CliError(f"gregor schemas needs the 'schemas' extra ({exc}): "
                       "run scripts/setup.sh schemas") from None
    return SchemaRegistryClient({"url": args.registry})


def _registry_call(call: Any) -> Any:
    """The call's result; a registry error becomes the command's error, in its words."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    try:
        return call()
    except SchemaRegistryError as exc:
        raise CliError(f"{exc.error_message} (error code {exc.error_code})") from None
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the schema registry: {exc}") from None


def _schema(args: argparse.Namespace) -> Any:
    from confluent_kafka.schema_registry import Schema, SchemaReference
    text = sys.stdin.read() if args.file == "-" else _read(args.file)
    references = []
    for item in args.reference:
        name, _, target = item.partition("=")
        subject, _, version = target.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise CliError(f"--reference takes NAME=SUBJECT:VERSION, not {item!r}")
        references.append(SchemaReference(name, subject, int(version)))
    return Schema(text, args.type, references)


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None


def run_list(args: argparse.Namespace) -> int:
    client = _client(args)
    subjects = _registry_call(lambda: client.get_subjects(subject_prefix=args.prefix or None,
                                                          deleted=args.deleted))
    rows = []
    for subject in subjects:
        latest = _registry_call(lambda s=subject: client.get_version(
            s, "latest", deleted=args.deleted))
        rows.append((subject, latest.version, latest.schema_id,
                     latest.schema.schema_type or "AVRO"))
    print_table(("SUBJECT", "VERSION", "ID", "TYPE"), rows)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    client = _client(args)
    found = _registry_call(lambda: client.get_version(args.subject, args.version))
    versions = _registry_call(lambda: client.get_versions(args.subject))
    level = _registry_call(lambda: client.get_compatibility(args.subject)) if _has_config(
        client, args.subject) else _registry_call(client.get_compatibility) + " (global)"
    print(f"subject:       {found.subject}")
    print(f"version:       {found.version} (versions: {', '.join(map(str, versions))})")
    print(f"id:            {found.schema_id}")
    print(f"type:          {found.schema.schema_type or 'AVRO'}")
    print(f"compatibility: {level}")
    for reference in found.schema.references or ():
        print(f"reference:     {reference.name} = {reference.subject} "
              f"version {reference.version}")
    text = found.schema.schema_str
    with contextlib.suppress(ValueError):  # Protobuf is shown as stored
        text = json.dumps(json.loads(text), indent=2)
    print(text)
    return 0


def _has_config(client: Any, subject: str) -> bool:
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    try:
        client.get_compatibility(subject)
    except SchemaRegistryError as exc:
        if exc.error_code == 40408:
            return False
        raise
    return True


def run_register(args: argparse.Namespace) -> int:
    client = _client(args)
    schema = _schema(args)
    schema_id = _registry_call(lambda: client.register_schema(
        args.subject, schema, normalize_schemas=args.normalize))
    print(schema_id)
    return 0


def run_check(args: argparse.Namespace) -> int:
    client = _client(args)
    schema = _schema(args)
    if args.version is None:
        compatible = _registry_call(lambda: client.test_compatibility_all_versions(
            args.subject, schema, normalize=args.normalize))
    else:
        compatible = _registry_call(lambda: client.test_compatibility(
            args.subject, schema, args.version, normalize=args.normalize))
    print("compatible" if compatible else "incompatible")
    return 0 if compatible else 1


def run_delete(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.version is None:
        deleted = _registry_call(lambda: client.delete_subject(args.subject, args.permanent))
        print(f"deleted {args.subject} versions {', '.join(map(str, deleted))}")
    else:
        version = _registry_call(lambda: client.delete_version(
            args.subject, args.version, args.permanent))
        print(f"deleted {args.subject} version {version}")
    return 0
