"""``gregor topics``: create, list, describe, alter and delete topics with the Kafka admin API."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from gregor.cli.client_config import add_client_arguments, client_config, parse_assignments
from gregor.cli.cluster_metadata import cluster_metadata
from gregor.cli.errors import CliError, admin_result, kafka_error_text


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics")
    actions = topics.add_subparsers(dest="action", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1,
                        help="partition count (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="replica count (default: the broker's default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="topic config, e.g. --config retention.ms=60000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic already exists")
    create.set_defaults(run=run_create)

    listing = actions.add_parser("list", help="list topic names")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser(
        "describe", help="partitions, leaders, replicas, ISR, offsets and config overrides")
    describe.add_argument("names", nargs="*", metavar="NAME", help="topics (default: all)")
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", help="add partitions or change topic configs")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                       help="set a topic config (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="remove a topic config override, back to the default (repeatable)")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", help="delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed for topics that do not exist")
    delete.set_defaults(run=run_delete)

    for action in (create, listing, describe, alter, delete):
        add_client_arguments(action)


def _connect(args: argparse.Namespace) -> tuple[AdminClient, ClusterMetadata]:
    config, watch = client_config(args)
    admin = AdminClient(config)
    return admin, cluster_metadata(admin, watch)


def _existing(metadata: ClusterMetadata, name: str) -> bool:
    topic = metadata.topics.get(name)
    return topic is not None and topic.error is None


def _require_topics(metadata: ClusterMetadata, names: Iterable[str]) -> None:
    missing = [name for name in names if not _existing(metadata, name)]
    if missing:
        raise CliError(f"unknown topic{'s' if len(missing) > 1 else ''} "
                       + ", ".join(repr(name) for name in missing))


def run_create(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    configs = dict(parse_assignments(args.config, "--config"))
    new_topic = NewTopic(args.name, num_partitions=args.partitions,
                         replication_factor=args.replication_factor, config=configs)
    future = admin.create_topics([new_topic])[args.name]
    try:
        future.result()
    except KafkaException as exc:
        error = exc.args[0]
        if args.if_not_exists and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        raise CliError(f"cannot create topic {args.name!r}: {kafka_error_text(exc)}") from None
    print(f"Created topic {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    _, metadata = _connect(args)
    for name in sorted(name for name in metadata.topics if _existing(metadata, name)):
        print(name)
    return 0


def _offsets(admin: AdminClient, partitions: list[TopicPartition],
             spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({tp: spec for tp in partitions})
    return {(tp.topic, tp.partition): admin_result(future, f"list offsets of {tp.topic}").offset
            for tp, future in futures.items()}


def _config_overrides(admin: AdminClient,
                      names: list[str]) -> dict[str, dict[str, str | None]]:
    """Per topic, the configs set on the topic itself (what ``kafka-topics --describe`` shows);
    a sensitive config's value is None, as the broker does not disclose it."""
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    overrides = {}
    for resource, future in futures.items():
        entries: Mapping[str, ConfigEntry] = admin_result(future, f"describe {resource.name}")
        overrides[resource.name] = {
            name: entry.value for name, entry in sorted(entries.items())
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return overrides


def run_describe(args: argparse.Namespace) -> int:
    admin, metadata = _connect(args)
    names = args.names or sorted(name for name in metadata.topics if _existing(metadata, name))
    _require_topics(metadata, names)
    # An offline partition (no leader) has no offsets to list.
    partitions = [TopicPartition(name, index) for name in names
                  for index, p in sorted(metadata.topics[name].partitions.items())
                  if p.leader >= 0]
    log_start = _offsets(admin, partitions, OffsetSpec.earliest())
    log_end = _offsets(admin, partitions, OffsetSpec.latest())
    overrides = _config_overrides(admin, names)
    for name in names:
        topic = metadata.topics[name]
        replication = max((len(p.replicas) for p in topic.partitions.values()), default=0)
        configs = ",".join(f"{key}={value}" for key, value in overrides[name].items())
        print(f"Topic: {name}\tPartitionCount: {len(topic.partitions)}\t"
              f"ReplicationFactor: {replication}\tConfigs: {configs}")
        for index in sorted(topic.partitions):
            print(f"{partition_row(metadata, name, index)}\t"
                  f"LogStartOffset: {log_start.get((name, index), '-')}\t"
                  f"LogEndOffset: {log_end.get((name, index), '-')}")
    return 0


def format_ids(brokers: Iterable[int]) -> str:
    return ",".join(str(broker) for broker in brokers)


def partition_row(metadata: ClusterMetadata, topic: str, index: int) -> str:
    """One partition as ``kafka-topics --describe`` prints it, with its offline replicas:
    those on brokers that are not live (Metadata lists live brokers only)."""
    partition = metadata.topics[topic].partitions[index]
    offline = [r for r in partition.replicas if r not in metadata.brokers]
    return (f"\tTopic: {topic}\tPartition: {index}\tLeader: {partition.leader}\t"
            f"Replicas: {format_ids(partition.replicas)}\tIsr: {format_ids(partition.isrs)}\t"
            f"Offline: {format_ids(offline)}")


def run_alter(args: argparse.Namespace) -> int:
    changes = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in parse_assignments(args.config, "--config")]
    changes += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                for name in args.delete_config]
    if args.partitions is None and not changes:
        raise CliError("topics alter needs --partitions, --config or --delete-config")
    admin, metadata = _connect(args)
    _require_topics(metadata, [args.name])
    if args.partitions is not None:
        before = len(metadata.topics[args.name].partitions)
        future = admin.create_partitions([NewPartitions(args.name, args.partitions)])[args.name]
        admin_result(future, f"add partitions to {args.name!r}")
        print(f"Topic {args.name}: partitions {before} -> {args.partitions}.")
    if changes:
        resource = ConfigResource(ResourceType.TOPIC, args.name, incremental_configs=changes)
        for future in admin.incremental_alter_configs([resource]).values():
            admin_result(future, f"alter configs of {args.name!r}")
        for entry in changes:
            action = ("deleted" if entry.incremental_operation == AlterConfigOpType.DELETE
                      else f"set to {entry.value}")
            print(f"Topic {args.name}: {entry.name} {action}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    failures = []
    for name, future in admin.delete_topics(args.names).items():
        try:
            future.result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                failures.append(f"{name!r}: {kafka_error_text(exc)}")
            elif not args.if_exists:
                failures.append(f"{name!r}: unknown topic")
            continue
        print(f"Deleted topic {name}.")
    if failures:
        raise CliError("cannot delete topic " + "; ".join(failures))
    return 0
