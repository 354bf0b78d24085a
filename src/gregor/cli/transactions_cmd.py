"""``gregor transactions``: list and describe transactions, and describe a partition's
producers, as kafka-transactions.sh does.

confluent-kafka has no admin call for ListTransactions, DescribeTransactions or
DescribeProducers, so this command speaks them itself (with FindCoordinator for the
transactional id's coordinator, Metadata for a partition's leader), one blocking
request at a time. ``list`` asks every broker, as each
coordinates its own share of the transactional ids.

DescribeTransactions' answer is read here rather than by kio, whose decoder
refuses the start time -1 that a transaction not begun yet has.
"""

from __future__ import annotations

import argparse
import os
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema
from kio.schema.describe_producers.v0 import request as producers_request
from kio.schema.metadata.v1 import request as metadata_request
from kio.static.primitive import i32

from gregor.cli import wire
from gregor.cli.client_config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
from gregor.cli.errors import CliError
from gregor.cli.groups_cmd import print_table
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

_CLIENT_ID = "gregor-transactions"
_TRANSACTION_KEY_TYPE = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    transactions = subparsers.add_parser("transactions", help="list and describe transactions")
    actions = transactions.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every transactional id: producer id and state")
    listing.add_argument(
        "--duration-filter", type=int, default=-1, metavar="MS",
        help="only those whose transaction began more than MS ms ago, as the brokers "
             "filter them (an id with none begun counts as begun long ago); < 0: all")
    listing.set_defaults(run=run_list)
    describe = actions.add_parser(
        "describe", help="one transactional id: state, producer id and epoch, partitions, "
                         "start time and timeout")
    # kafka-transactions.sh takes the id as --transactional-id.
    named = describe.add_mutually_exclusive_group(required=True)
    named.add_argument("transactional_id", metavar="ID", nargs="?")
    named.add_argument("--transactional-id", dest="transactional_id_option", metavar="ID")
    describe.set_defaults(run=run_describe)
    producers = actions.add_parser(
        "describe-producers", help="a partition's producers: id, epoch, last sequence and "
                                   "timestamp, coordinator epoch, open transaction's start")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.add_argument("--broker-id", type=int, default=None,
                           help="ask this broker (a replica) instead of the leader")
    producers.set_defaults(run=run_describe_producers)
    for parser in (listing, describe, producers):
        parser.add_argument(
            "--bootstrap-server", "-b", metavar="HOST:PORT",
            default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
            help=f"a broker (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")


def _request(addresses: str, api_key: ApiKey, version: int, body: Any,
             raw: bool = False) -> Any:
    return wire.request(addresses, api_key, version, body, _CLIENT_ID, raw=raw)


def _schema(api_key: ApiKey, version: int) -> Any:
    return load_request_schema(api_key, version)


@dataclass(frozen=True, slots=True)
class _Described:
    error_code: int
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[str]


def _parse_describe_v0(frame: bytes) -> list[_Described]:
    """DescribeTransactions v0's answer (a flexible message, header v1 included): per id
    its error, id, state, timeout, start time, producer id and epoch, and topics with
    their partitions."""
    pos = 4  # correlation id

    def take(fmt: str) -> Any:
        nonlocal pos
        values = struct.unpack_from(fmt, frame, pos)
        pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def uvarint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = frame[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string() -> str:
        nonlocal pos
        length = uvarint() - 1
        text = frame[pos : pos + length].decode()
        pos += length
        return text

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            pos += uvarint()

    skip_tags()  # response header
    take(">i")  # throttle time
    described = []
    for _ in range(uvarint() - 1):
        error_code = take(">h")
        string()  # the transactional id, as asked
        state = string()
        timeout_ms, start_ms, producer_id, producer_epoch = take(">iqqh")
        partitions = []
        for _ in range(uvarint() - 1):
            topic = string()
            partitions += [f"{topic}-{take('>i')}" for _ in range(uvarint() - 1)]
            skip_tags()
        skip_tags()
        described.append(_Described(error_code, state, timeout_ms, start_ms, producer_id,
                                    producer_epoch, partitions))
    return described


def _brokers(bootstrap: str) -> list[tuple[int, str]]:
    schema = _schema(ApiKey.METADATA, 1)
    answer = _request(bootstrap, ApiKey.METADATA, 1, schema(topics=()))
    return sorted((b.node_id, f"{b.host}:{b.port}") for b in answer.brokers)


def run_list(args: argparse.Namespace) -> int:
    rows = []
    # Version 1 carries the duration filter; version 0 serves brokers without it.
    version, fields = ((1, {"duration_filter": args.duration_filter})
                       if args.duration_filter >= 0 else (0, {}))
    for broker_id, address in _brokers(args.bootstrap_server):
        schema = _schema(ApiKey.LIST_TRANSACTIONS, version)
        answer = _request(address, ApiKey.LIST_TRANSACTIONS, version,
                          schema(state_filters=(), producer_id_filters=(), **fields))
        if answer.error_code != ErrorCode.none:
            raise CliError(f"broker {broker_id}: {ErrorCode(answer.error_code).name.upper()}")
        rows += [(t.transactional_id, broker_id, t.producer_id, t.transaction_state)
                 for t in answer.transaction_states]
    print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                sorted(rows))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    txn_id = (args.transactional_id if args.transactional_id is not None
              else args.transactional_id_option)
    schema = _schema(ApiKey.FIND_COORDINATOR, 3)
    found = _request(args.bootstrap_server, ApiKey.FIND_COORDINATOR, 3,
                     schema(key=txn_id, key_type=_TRANSACTION_KEY_TYPE))
    if found.error_code != ErrorCode.none:
        raise CliError(f"no coordinator for {txn_id!r}: {ErrorCode(found.error_code).name.upper()}"
                       f"{f' ({found.error_message})' if found.error_message else ''}")
    schema = _schema(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    body = _request(f"{found.host}:{found.port}", ApiKey.DESCRIBE_TRANSACTIONS, 0,
                    schema(transactional_ids=(txn_id,)), raw=True)
    (state,) = _parse_describe_v0(body)
    if state.error_code != ErrorCode.none:
        raise CliError(f"cannot describe {txn_id!r}: {ErrorCode(state.error_code).name.upper()}")
    begun = state.start_ms >= 0
    print_table(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                 "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                 "TransactionDurationMs", "TopicPartitions"),
                [(found.node_id, txn_id, state.producer_id, state.producer_epoch, state.state,
                  state.timeout_ms, state.start_ms if begun else "None",
                  int(time.time() * 1000) - state.start_ms if begun else "None",
                  ",".join(state.partitions))])
    return 0


def run_describe_producers(args: argparse.Namespace) -> int:
    topic, index = args.topic, args.partition
    metadata = _request(args.bootstrap_server, ApiKey.METADATA, 1,
                        metadata_request.MetadataRequest(
                            topics=(metadata_request.MetadataRequestTopic(name=topic),)))
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    leaders = {p.partition_index: p.leader_id for t in metadata.topics if t.name == topic
               for p in t.partitions}
    broker_id = leaders.get(index, -1) if args.broker_id is None else args.broker_id
    if broker_id not in brokers:
        raise CliError(f"{topic}-{index}: no such partition, or no leader now"
                       if args.broker_id is None else f"no broker {broker_id}")
    answer = _request(brokers[broker_id], ApiKey.DESCRIBE_PRODUCERS, 0,
                      producers_request.DescribeProducersRequest(topics=(
                          producers_request.TopicRequest(name=topic,
                                                         partition_indexes=(i32(index),)),)))
    (partition,) = answer.topics[0].partitions
    if partition.error_code != ErrorCode.none:
        raise CliError(f"{topic}-{index} on broker {broker_id}: "
                       f"{ErrorCode(partition.error_code).name.upper()}")
    print_table(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                 "LastTimestamp", "CurrentTransactionStartOffset"),
                [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
                  p.last_timestamp,
                  "None" if p.current_txn_start_offset < 0 else p.current_txn_start_offset)
                 for p in partition.active_producers])
    return 0
