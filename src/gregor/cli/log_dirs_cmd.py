"""``gregor log-dirs describe``: each broker's log directories, with the partitions in
each and their sizes, in ``kafka-log-dirs.sh --describe``'s words and JSON.

DescribeLogDirs and AlterReplicaLogDirs go over a socket of their own to each broker
(librdkafka has neither call); ``gregor cluster reassign`` moves replicas between
directories with the same requests, for a plan's ``log_dirs``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from gregor.cli import wire
from gregor.cli.client_config import add_client_arguments, described_cluster
from gregor.cli.errors import CliError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

_CLIENT_ID = "gregor-log-dirs"
_TIMEOUT_S = 30.0
_DESCRIBE_VERSION, _ALTER_VERSION = 1, 1

TopicPartition = tuple[str, int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    log_dirs = subparsers.add_parser("log-dirs", help="brokers' log directories "
                                                      "(kafka-log-dirs.sh)")
    actions = log_dirs.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="each directory's partitions and sizes, "
                                                   "as kafka-log-dirs.sh --describe prints them")
    describe.add_argument("--broker-list", help="comma-separated broker ids (default: all)")
    describe.add_argument("--topic-list", help="comma-separated topics (default: all)")
    add_client_arguments(describe)
    describe.set_defaults(run=run_describe)


def _module(api_key: ApiKey, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def describe(address: str) -> Any:
    """One broker's DescribeLogDirs answer, for every partition it holds."""
    schema = _module(ApiKey.DESCRIBE_LOG_DIRS, _DESCRIBE_VERSION)
    return wire.request(address, ApiKey.DESCRIBE_LOG_DIRS, _DESCRIBE_VERSION,
                        schema.DescribeLogDirsRequest(topics=None), _CLIENT_ID,
                        timeout_s=_TIMEOUT_S)


def alter(address: str, moves: dict[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
    """AlterReplicaLogDirs to one broker: each of its replicas to the directory named."""
    schema = _module(ApiKey.ALTER_REPLICA_LOG_DIRS, _ALTER_VERSION)
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (topic, index), path in sorted(moves.items()):
        by_dir.setdefault(path, {}).setdefault(topic, []).append(index)
    body = schema.AlterReplicaLogDirsRequest(dirs=tuple(
        schema.AlterReplicaLogDir(path=path, topics=tuple(
            schema.AlterReplicaLogDirTopic(name=topic, partitions=tuple(indexes))
            for topic, indexes in topics.items()))
        for path, topics in by_dir.items()))
    answer = wire.request(address, ApiKey.ALTER_REPLICA_LOG_DIRS, _ALTER_VERSION, body,
                          _CLIENT_ID, timeout_s=_TIMEOUT_S)
    return {(t.topic_name, p.partition_index): ErrorCode(p.error_code)
            for t in answer.results for p in t.partitions}


def run_describe(args: argparse.Namespace) -> int:
    _, described = described_cluster(args, _TIMEOUT_S)
    addresses = {n.id: f"{n.host}:{n.port}" for n in described.nodes}
    wanted = sorted(addresses)
    if args.broker_list:
        try:
            wanted = [int(b) for b in args.broker_list.split(",") if b.strip()]
        except ValueError:
            raise CliError(f"--broker-list takes broker ids, got {args.broker_list!r}") from None
        unknown = [b for b in wanted if b not in addresses]
        if unknown:
            raise CliError(f"unknown broker(s): {unknown}")
    topics = (None if not args.topic_list
              else {t.strip() for t in args.topic_list.split(",") if t.strip()})
    print("Querying brokers for log directories information")
    brokers = []
    for broker_id in wanted:
        answer = describe(addresses[broker_id])
        brokers.append({"broker": broker_id, "logDirs": [{
            "partitions": [{"partition": f"{t.name}-{p.partition_index}",
                            "size": p.partition_size, "offsetLag": p.offset_lag,
                            "isFuture": p.is_future_key}
                           for t in result.topics if topics is None or t.name in topics
                           for p in t.partitions],
            "error": None if result.error_code == ErrorCode.none
            else ErrorCode(result.error_code).name,
            "logDir": result.log_dir} for result in answer.results]})
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}")
    print(json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":")))
    return 0
