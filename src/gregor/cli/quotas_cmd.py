"""``gregor quotas``: client quotas of users and client ids, as ``kafka-configs.sh
--entity-type users|clients --alter --add-config 'producer_byte_rate=1048576'`` sets them,
with Kafka's admin API (AlterClientQuotas, DescribeClientQuotas; KIP-546).

librdkafka has no client for that API, so these commands send it themselves, over the
connection a broker uses to reach another (:class:`BrokerChannel`), with the client's
security settings given as librdkafka's (``-X security.protocol=SASL_SSL``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from typing import Any

from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.describe_client_quotas.v1 import request as describe
from kio.static.primitive import f64, i8

from gregor.cli.client_config import add_client_arguments, client_config, parse_assignments
from gregor.cli.errors import CliError
from gregor.cluster.broker_channel import BrokerChannel, ChannelError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.security.quota_entities import CLIENT_ID, QUOTA_KEYS, USER

_TIMEOUT_S = 15.0
_EXACT, _DEFAULT = i8(0), i8(1)
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    quotas = subparsers.add_parser(
        "quotas", help="set and show client quotas of users and client ids "
                       "(kafka-configs.sh --entity-type users/clients)")
    actions = quotas.add_subparsers(dest="action", required=True)
    alter_parser = actions.add_parser(
        "alter", help="set or remove quotas of one entity: a user, a client id, or both")
    alter_parser.add_argument("--add", action="append", default=[], metavar="QUOTA=VALUE",
                              help=f"set a quota (repeatable): {', '.join(QUOTA_KEYS)}")
    alter_parser.add_argument("--delete", action="append", default=[], metavar="QUOTA",
                              help="remove a quota (repeatable)")
    alter_parser.set_defaults(run=run_alter)
    describe_parser = actions.add_parser(
        "describe", help="entities and their quotas (all, or those the options match)")
    describe_parser.add_argument("--strict", action="store_true",
                                 help="only entities of exactly the types given")
    describe_parser.set_defaults(run=run_describe)
    for parser in (alter_parser, describe_parser):
        user = parser.add_mutually_exclusive_group()
        user.add_argument("--user", help="a user (principal name)")
        user.add_argument("--user-default", action="store_true",
                          help="the default of every user")
        client = parser.add_mutually_exclusive_group()
        client.add_argument("--client-id", help="a client id")
        client.add_argument("--client-default", action="store_true",
                            help="the default of every client id")
        add_client_arguments(parser)


def run_alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    if not entity:
        raise CliError("name a user (--user/--user-default), a client id "
                       "(--client-id/--client-default) or both")
    ops = []
    for key, value in parse_assignments(args.add, "--add"):
        try:
            number = float(value)
        except ValueError:
            raise CliError(f"--add {key}: {value!r} is not a number") from None
        ops.append(alter.OpData(key=key, value=f64(number), remove=False))
    ops += [alter.OpData(key=key, value=f64(0.0), remove=True) for key in args.delete]
    if not ops:
        raise CliError("nothing to change: give --add or --delete")
    answer = _send(args, ApiKey.ALTER_CLIENT_QUOTAS, alter.AlterClientQuotasRequest(
        entries=(alter.EntryData(entity=tuple(
            alter.EntityData(entity_type=kind, entity_name=name)
            for kind, name in entity.items()), ops=tuple(ops)),), validate_only=False))
    (entry,) = answer.entries
    if entry.error_code != ErrorCode.none:
        raise CliError(f"cannot alter the quotas of {_describe_entity(entity)}: "
                       f"{entry.error_message or ErrorCode(entry.error_code).name}")
    print(f"Altered the quotas of {_describe_entity(entity)}.")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    components = [describe.ComponentData(
        entity_type=kind, match_type=_EXACT if name is not None else _DEFAULT, match=name)
        for kind, name in _entity(args).items()]
    answer = _send(args, ApiKey.DESCRIBE_CLIENT_QUOTAS, describe.DescribeClientQuotasRequest(
        components=tuple(components), strict=args.strict))
    if answer.error_code != ErrorCode.none:
        raise CliError(f"cannot describe quotas: "
                       f"{answer.error_message or ErrorCode(answer.error_code).name}")
    for entry in answer.entries:
        entity = {e.entity_type: e.entity_name for e in entry.entity}
        values = ", ".join(f"{v.key}={_number(v.value)}" for v in entry.values)
        print(f"Quotas of {_describe_entity(entity)}: {values}")
    return 0


def _entity(args: argparse.Namespace) -> dict[str, str | None]:
    """The entity the options name (type -> name, None for the default)."""
    entity: dict[str, str | None] = {}
    if args.user is not None or args.user_default:
        entity[USER] = args.user
    if args.client_id is not None or args.client_default:
        entity[CLIENT_ID] = args.client_id
    return entity


def _describe_entity(entity: dict[str, str | None]) -> str:
    return " and ".join(f"{kind} {'<default>' if name is None else repr(name)}"
                        for kind, name in entity.items())


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _send(args: argparse.Namespace, api_key: int, body: Any) -> Any:
    config, _ = client_config(args)
    first = str(config["bootstrap.servers"]).split(",")[0]
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"--bootstrap-server: expected HOST:PORT, got {first!r}")
    address = (host.strip("[]"), int(port))
    channel = BrokerChannel(-1, lambda _: address, _TIMEOUT_S,
                            security=channel_security(config))

    async def exchange() -> Any:
        try:
            return await channel.request(api_key, 1, body)
        finally:
            channel.close()

    try:
        return asyncio.run(exchange())
    except ChannelError as exc:
        raise CliError(f"no answer from {first}: {exc}") from None


def channel_security(config: dict[str, Any]) -> ChannelSecurity | None:
    """librdkafka's security settings (``security.protocol``, ``sasl.mechanism(s)``,
    ``sasl.username``/``password``, ``ssl.ca.location``, ``ssl.certificate.location``,
    ``ssl.key.location``/``password``, ``ssl.endpoint.identification.algorithm``) as a
    broker channel's."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", *_SASL_PROTOCOLS, *_TLS_PROTOCOLS):
        raise CliError(f"security.protocol {protocol}: expected PLAINTEXT, SSL, "
                       "SASL_PLAINTEXT or SASL_SSL")
    context = None
    if protocol in _TLS_PROTOCOLS:
        context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
        if config.get("ssl.certificate.location"):
            context.load_cert_chain(config["ssl.certificate.location"],
                                    config.get("ssl.key.location"),
                                    config.get("ssl.key.password"))
        context.check_hostname = (
            str(config.get("ssl.endpoint.identification.algorithm", "https")).lower()
            == "https")
    if protocol not in _SASL_PROTOCOLS:
        return None if context is None else ChannelSecurity(context)
    mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")))
    return ChannelSecurity(context, mechanism.upper(), str(config.get("sasl.username", "")),
                           str(config.get("sasl.password", "")))
