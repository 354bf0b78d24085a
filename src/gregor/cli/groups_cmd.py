"""``gregor groups``: list, describe, reset offsets of and delete consumer groups.

Modelled on Kafka's ``kafka-consumer-groups`` (same column names, and reset-offsets
is a dry run unless ``--execute``), built on the Kafka admin API so it works with
any Kafka-compatible broker. ``describe`` adds LEAD, the distance of the committed
offset from the log start offset: when it nears zero, retention is about to delete
records the group has not read yet.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import Future

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConsumerGroupDescription,
    OffsetSpec,
)

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.cluster_metadata import cluster_metadata
from gregor.cli.errors import CliError, kafka_error_text

# librdkafka's names for the group states, mapped back to Kafka's own.
_STATE_NAMES = {
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.UNKNOWN: "Unknown",
}
_NONE = "-"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    groups = subparsers.add_parser("groups", help="list, describe, reset and delete groups")
    actions = groups.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="list consumer group ids")
    listing.add_argument("--state", action="store_true", help="show each group's state")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser(
        "describe", help="members, assignments, committed offsets, lag and lead")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.set_defaults(run=run_describe)

    reset = actions.add_parser(
        "reset-offsets", help="move a group's committed offsets (a dry run unless --execute)")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                       help="topic, optionally with partitions, e.g. orders:0,2 (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-datetime", metavar="ISO",
                        help="the first offset at or after a time, e.g. 2024-05-01T12:00:00 "
                             "(local time unless it names a zone, e.g. ...+00:00)")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (N may be negative)")
    reset.add_argument("--execute", action="store_true", help="apply the new offsets")
    reset.set_defaults(run=run_reset_offsets)

    delete = actions.add_parser("delete", help="delete groups that have no active members")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.set_defaults(run=run_delete)

    for action in (listing, describe, reset, delete):
        add_client_arguments(action)


def _connect(args: argparse.Namespace) -> tuple[AdminClient, ClusterMetadata]:
    """An admin client, and the cluster's metadata (which fails fast if no broker answers)."""
    config, watch = client_config(args)
    admin = AdminClient(config)
    return admin, cluster_metadata(admin, watch)


def _result(future: Future, what: str) -> object:
    try:
        return future.result()
    except KafkaException as exc:
        raise CliError(f"cannot {what}: {kafka_error_text(exc)}") from None


def _print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [[str(value) for value in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
              .rstrip())


def _log_offsets(admin: AdminClient, partitions: Iterable[tuple[str, int]],
                 spec: OffsetSpec) -> dict[tuple[str, int], int]:
    wanted = {TopicPartition(topic, partition): spec for topic, partition in partitions}
    if not wanted:
        return {}
    return {(tp.topic, tp.partition): _result(future, f"list offsets of {tp.topic}").offset
            for tp, future in admin.list_offsets(wanted).items()}


def _describe(admin: AdminClient, group: str) -> ConsumerGroupDescription | None:
    """The group's description, or None if it does not exist ("Dead")."""
    description = _result(admin.describe_consumer_groups([group])[group], f"describe {group!r}")
    assert isinstance(description, ConsumerGroupDescription)
    return None if description.state == ConsumerGroupState.DEAD else description


def _committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    answer = _result(admin.list_consumer_group_offsets(request)[group],
                     f"list offsets of group {group!r}")
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions
            if tp.error is None and tp.offset >= 0}


# --------------------------------------------------------------------- list
def run_list(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    listed = _result(admin.list_consumer_groups(), "list groups")
    if listed.errors:
        raise CliError(f"cannot list groups: {listed.errors[0]}")
    groups = sorted(listed.valid, key=lambda g: g.group_id)
    if args.state:
        _print_table(("GROUP", "STATE"), [(g.group_id, _STATE_NAMES.get(g.state, g.state))
                                          for g in groups])
    else:
        for group in groups:
            print(group.group_id)
    return 0


# ----------------------------------------------------------------- describe
def run_describe(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    for index, group in enumerate(args.groups):
        if index:
            print()
        _describe_one(admin, group)
    return 0


def _describe_one(admin: AdminClient, group: str) -> None:
    description = _describe(admin, group)
    if description is None:
        raise CliError(f"consumer group {group!r} does not exist")
    committed = _committed(admin, group)
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    partitions = sorted(committed.keys() | owners.keys())
    log_start = _log_offsets(admin, partitions, OffsetSpec.earliest())
    log_end = _log_offsets(admin, partitions, OffsetSpec.latest())
    state = _STATE_NAMES.get(description.state, str(description.state))
    members = description.members
    assignor = description.partition_assignor or _NONE
    print(f"Consumer group '{group}' is {state} with {len(members)} member(s), "
          f"assignor {assignor}, coordinator {description.coordinator.id}.")
    print()
    rows = []
    for tp in partitions:
        offset = committed.get(tp)
        owner = owners.get(tp)
        rows.append((
            group, tp[0], tp[1], _NONE if offset is None else offset, log_end[tp],
            _NONE if offset is None else log_end[tp] - offset,
            _NONE if offset is None else offset - log_start[tp],
            owner.member_id if owner else _NONE, owner.host if owner else _NONE,
            owner.client_id if owner else _NONE))
    _print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "LEAD", "CONSUMER-ID", "HOST", "CLIENT-ID"), rows)
    print()
    if not members:
        print(f"Consumer group '{group}' has no active members.")
        return
    _print_table(("CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                  "ASSIGNMENT"), [
        (m.member_id, m.group_instance_id or _NONE, m.host, m.client_id,
         len(m.assignment.topic_partitions), _assignment_text(m.assignment.topic_partitions))
        for m in members])


def _assignment_text(partitions: list[TopicPartition]) -> str:
    """``orders(0,1),audit(2)``, as kafka-consumer-groups --members --verbose prints it."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{topic}({','.join(str(p) for p in sorted(ps))})"
                    for topic, ps in sorted(by_topic.items())) or _NONE


# ------------------------------------------------------------ reset-offsets
def run_reset_offsets(args: argparse.Namespace) -> int:
    admin, metadata = _connect(args)
    # A group that does not exist yet may be given offsets: that is how one decides
    # where a new group will start.
    description = _describe(admin, args.group)
    if description is not None and description.members:
        state = _STATE_NAMES.get(description.state, str(description.state))
        raise CliError(f"offsets can only be reset while group {args.group!r} is inactive "
                       f"(it is {state} with {len(description.members)} member(s))")
    partitions = _reset_partitions(metadata, args.topic)
    targets = _targets(admin, args, partitions)
    if args.execute:
        request = [ConsumerGroupTopicPartitions(args.group, [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in targets.items()])]
        _result(admin.alter_consumer_group_offsets(request)[args.group],
                f"reset offsets of group {args.group!r}")
    _print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                 [(args.group, topic, partition, offset)
                  for (topic, partition), offset in targets.items()])
    if not args.execute:
        print("Dry run: nothing was changed; add --execute to apply these offsets.",
              file=sys.stderr)
    return 0


def _reset_partitions(metadata: ClusterMetadata, topics: list[str]) -> list[tuple[str, int]]:
    partitions = []
    for spec in topics:
        topic, _, listed = spec.partition(":")
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise CliError(f"unknown topic {topic!r}")
        existing = sorted(found.partitions)
        wanted = existing
        if listed:
            try:
                wanted = [int(p) for p in listed.split(",")]
            except ValueError:
                raise CliError(f"--topic expects TOPIC or TOPIC:P,P..., got {spec!r}") from None
            missing = [p for p in wanted if p not in existing]
            if missing:
                raise CliError(f"topic {topic!r} has no partition {missing[0]}")
        partitions.extend((topic, p) for p in wanted)
    return partitions


def _targets(admin: AdminClient, args: argparse.Namespace,
             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The new offset of each partition, kept inside [log start, log end] as Kafka's tool does."""
    start = _log_offsets(admin, partitions, OffsetSpec.earliest())
    end = _log_offsets(admin, partitions, OffsetSpec.latest())
    if args.to_earliest:
        return start
    if args.to_latest:
        return end
    if args.to_datetime is not None:
        at = _timestamp_ms(args.to_datetime)
        found = _log_offsets(admin, partitions, OffsetSpec.for_timestamp(at))
        # No record at or after that time: the group starts at the end.
        return {tp: offset if offset >= 0 else end[tp] for tp, offset in found.items()}
    if args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    else:
        committed = _committed(admin, args.group)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise CliError(f"cannot shift {missing[0][0]}-{missing[0][1]}: group "
                           f"{args.group!r} has no committed offset there")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    return {tp: min(max(offset, start[tp]), end[tp]) for tp, offset in wanted.items()}


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime expects an ISO 8601 time such as "
                       f"2024-05-01T12:00:00.000, got {text!r}") from None
    return int(moment.timestamp() * 1000)


# ------------------------------------------------------------------- delete
def run_delete(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    failures = []
    for group, future in admin.delete_consumer_groups(args.groups).items():
        try:
            future.result()
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError.NON_EMPTY_GROUP:
                failures.append(f"{group!r} has active members")
            elif code == KafkaError.GROUP_ID_NOT_FOUND:
                failures.append(f"{group!r} does not exist")
            else:
                failures.append(f"{group!r}: {kafka_error_text(exc)}")
            continue
        print(f"Deleted consumer group {group}.")
    if failures:
        raise CliError("cannot delete group " + "; ".join(failures))
    return 0
