"""``gregor users``: SCRAM users (KIP-554's admin API), as ``kafka-configs.sh
--entity-type users --add-config 'SCRAM-SHA-256=[password=...]'`` manages them.

The password never reaches the broker: librdkafka salts and hashes it and sends the
salted password, from which the broker derives what it stores.
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.cluster_metadata import cluster_metadata
from gregor.cli.errors import CliError, admin_result

_MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
               "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    users = subparsers.add_parser("users", help="create, describe, delete SCRAM users")
    actions = users.add_subparsers(dest="action", required=True)

    create = actions.add_parser(
        "create", help="create a SCRAM user, or set a new password (read from stdin unless "
                       "--password is given)")
    create.add_argument("name")
    create.add_argument("--password", help="the password (visible to other local users in "
                                           "the process list: prefer stdin)")
    create.add_argument("--mechanism", action="append", choices=sorted(_MECHANISMS),
                        help="SCRAM mechanism (repeatable; default: both)")
    create.add_argument("--iterations", type=int, default=4096,
                        help="PBKDF2 iterations, 4096 to 16384 (default 4096)")
    create.set_defaults(run=run_create)

    describe = actions.add_parser("describe", help="users and their SCRAM mechanisms")
    describe.add_argument("names", nargs="*", metavar="NAME", help="users (default: all)")
    describe.set_defaults(run=run_describe)

    delete = actions.add_parser("delete", help="remove a user's SCRAM credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", choices=sorted(_MECHANISMS),
                        help="only this mechanism's credential (repeatable; default: all)")
    delete.set_defaults(run=run_delete)

    for action in (create, describe, delete):
        add_client_arguments(action)


def _admin(args: argparse.Namespace) -> AdminClient:
    config, watch = client_config(args)
    admin = AdminClient(config)
    cluster_metadata(admin, watch)  # fails in one line when no broker answers
    return admin


def run_create(args: argparse.Namespace) -> int:
    password = args.password
    if password is None:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CliError("an empty password is not accepted")
    admin = _admin(args)
    upsertions: list[UserScramCredentialAlteration] = [UserScramCredentialUpsertion(
        args.name, ScramCredentialInfo(_MECHANISMS[name], args.iterations), password.encode())
        for name in args.mechanism or sorted(_MECHANISMS)]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        admin_result(future, f"set the credentials of {args.name!r}")
    print(f"Set the SCRAM credentials of user {args.name}.")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.describe_user_scram_credentials(args.names or None)
    if isinstance(futures, dict):
        described = {name: admin_result(future, f"describe user {name!r}")
                     for name, future in futures.items()}
    else:
        described = admin_result(futures, "describe users")
    for name in sorted(described):
        mechanisms = ", ".join(
            f"{info.mechanism.name.replace('_', '-')} (iterations {info.iterations})"
            for info in described[name].scram_credential_infos)
        print(f"{name}\t{mechanisms}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    names = args.mechanism
    if not names:
        futures = admin.describe_user_scram_credentials([args.name])
        assert isinstance(futures, dict)  # a dict when users are named
        found = admin_result(futures[args.name], f"describe user {args.name!r}")
        names = [info.mechanism.name.replace("_", "-") for info in found.scram_credential_infos]
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(args.name, _MECHANISMS[name]) for name in names]
    for future in admin.alter_user_scram_credentials(deletions).values():
        admin_result(future, f"delete the credentials of {args.name!r}")
    print(f"Deleted the SCRAM credentials of user {args.name}.")
    return 0
