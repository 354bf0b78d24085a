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
from dataclasses import dataclass
from enum import Enum
from typing import Literal

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
    MemberDescription,
    OffsetSpec,
)

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.cluster_metadata import cluster_metadata
from gregor.cli.errors import CliError, admin_result, kafka_error_text

# librdkafka's names for the group states, mapped back to Kafka's own. Keyed by Enum:
# confluent-kafka types the state of a group description as Enum, not ConsumerGroupState.
STATE_NAMES: dict[Enum, str] = {
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


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [[str(value) for value in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
              .rstrip())


def log_offsets(admin: AdminClient, partitions: Iterable[tuple[str, int]],
                spec: OffsetSpec) -> dict[tuple[str, int], int]:
    wanted = {TopicPartition(topic, partition): spec for topic, partition in partitions}
    if not wanted:
        return {}
    return {(tp.topic, tp.partition): admin_result(future, f"list offsets of {tp.topic}").offset
            for tp, future in admin.list_offsets(wanted).items()}


def describe_group(admin: AdminClient, group: str) -> ConsumerGroupDescription | None:
    """The group's description, or None if it does not exist ("Dead")."""
    description = admin_result(admin.describe_consumer_groups([group])[group],
                               f"describe {group!r}")
    assert isinstance(description, ConsumerGroupDescription)
    return None if description.state == ConsumerGroupState.DEAD else description


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    answer = admin_result(admin.list_consumer_group_offsets(request)[group],
                          f"list offsets of group {group!r}")
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions
            if tp.error is None and tp.offset >= 0}


# --------------------------------------------------------------------- list
def run_list(args: argparse.Namespace) -> int:
    admin, _ = _connect(args)
    listed = admin_result(admin.list_consumer_groups(), "list groups")
    if listed.errors:
        raise CliError(f"cannot list groups: {listed.errors[0]}")
    groups = sorted(listed.valid, key=lambda g: g.group_id)
    if args.state:
        print_table(("GROUP", "STATE"), [(g.group_id, STATE_NAMES.get(g.state, g.state))
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


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position in one partition: a row of ``describe``, for any front end."""

    topic: str
    partition: int
    committed: int | None  # None: the group has no offset committed there
    log_start: int
    log_end: int
    owner: MemberDescription | None  # the member assigned the partition, if any

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else self.log_end - self.committed

    @property
    def lead(self) -> int | None:
        return None if self.committed is None else self.committed - self.log_start


def partition_lags(admin: AdminClient, group: str,
                   description: ConsumerGroupDescription) -> list[PartitionLag]:
    """Every partition the group committed to or is assigned, in topic, partition order."""
    committed = committed_offsets(admin, group)
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    partitions = sorted(committed.keys() | owners.keys())
    log_start = log_offsets(admin, partitions, OffsetSpec.earliest())
    log_end = log_offsets(admin, partitions, OffsetSpec.latest())
    return [PartitionLag(tp[0], tp[1], committed.get(tp), log_start[tp], log_end[tp],
                         owners.get(tp)) for tp in partitions]


def _describe_one(admin: AdminClient, group: str) -> None:
    description = describe_group(admin, group)
    if description is None:
        raise CliError(f"consumer group {group!r} does not exist")
    lags = partition_lags(admin, group, description)
    state = STATE_NAMES.get(description.state, str(description.state))
    members = description.members
    assignor = description.partition_assignor or _NONE
    print(f"Consumer group '{group}' is {state} with {len(members)} member(s), "
          f"assignor {assignor}, coordinator {description.coordinator.id}.")
    print()
    rows = []
    for row in lags:
        owner = row.owner
        rows.append((
            group, row.topic, row.partition, _or_none(row.committed), row.log_end,
            _or_none(row.lag), _or_none(row.lead),
            owner.member_id if owner else _NONE, owner.host if owner else _NONE,
            owner.client_id if owner else _NONE))
    print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "LEAD", "CONSUMER-ID", "HOST", "CLIENT-ID"), rows)
    print()
    if not members:
        print(f"Consumer group '{group}' has no active members.")
        return
    print_table(("CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                  "ASSIGNMENT"), [
        (m.member_id, m.group_instance_id or _NONE, m.host, m.client_id,
         len(m.assignment.topic_partitions), assignment_text(m.assignment.topic_partitions))
        for m in members])


def _or_none(value: int | None) -> object:
    return _NONE if value is None else value


def assignment_text(partitions: list[TopicPartition]) -> str:
    """``orders(0,1),audit(2)``, as kafka-consumer-groups --members --verbose prints it."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{topic}({','.join(str(p) for p in sorted(ps))})"
                    for topic, ps in sorted(by_topic.items())) or _NONE


# ------------------------------------------------------------ reset-offsets
def run_reset_offsets(args: argparse.Namespace) -> int:
    admin, metadata = _connect(args)
    require_inactive(admin, args.group)
    partitions = reset_partitions(metadata, args.topic)
    targets = reset_targets(admin, args.group, partitions, _reset_to(args))
    if args.execute:
        commit_offsets(admin, args.group, targets)
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                 [(args.group, topic, partition, offset)
                  for (topic, partition), offset in targets.items()])
    if not args.execute:
        print("Dry run: nothing was changed; add --execute to apply these offsets.",
              file=sys.stderr)
    return 0


def require_inactive(admin: AdminClient, group: str) -> None:
    """Refuse to move the offsets of a group with members, as Kafka's tool does: they
    would overwrite the new offsets with their next commit.

    A group that does not exist yet may be given offsets: that is how one decides
    where a new group will start.
    """
    description = describe_group(admin, group)
    if description is not None and description.members:
        state = STATE_NAMES.get(description.state, str(description.state))
        raise CliError(f"offsets can only be reset while group {group!r} is inactive "
                       f"(it is {state} with {len(description.members)} member(s))")


def commit_offsets(admin: AdminClient, group: str,
                   offsets: dict[tuple[str, int], int]) -> None:
    request = [ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, partition, offset)
        for (topic, partition), offset in offsets.items()])]
    admin_result(admin.alter_consumer_group_offsets(request)[group],
                 f"reset offsets of group {group!r}")


def reset_partitions(metadata: ClusterMetadata, topics: list[str]) -> list[tuple[str, int]]:
    partitions: list[tuple[str, int]] = []
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


@dataclass(frozen=True, slots=True)
class ResetTo:
    """Where reset-offsets moves a group: ``earliest``, ``latest``, ``timestamp``
    (``value`` in ms since the epoch), ``offset`` (``value``) or ``shift`` (by ``value``)."""

    kind: Literal["earliest", "latest", "timestamp", "offset", "shift"]
    value: int = 0


def _reset_to(args: argparse.Namespace) -> ResetTo:
    if args.to_earliest:
        return ResetTo("earliest")
    if args.to_latest:
        return ResetTo("latest")
    if args.to_datetime is not None:
        return ResetTo("timestamp", _timestamp_ms(args.to_datetime))
    if args.to_offset is not None:
        return ResetTo("offset", args.to_offset)
    return ResetTo("shift", args.shift_by)


def reset_targets(admin: AdminClient, group: str, partitions: list[tuple[str, int]],
                  to: ResetTo) -> dict[tuple[str, int], int]:
    """The new offset of each partition, kept inside [log start, log end] as Kafka's tool does."""
    start = log_offsets(admin, partitions, OffsetSpec.earliest())
    end = log_offsets(admin, partitions, OffsetSpec.latest())
    if to.kind == "earliest":
        return start
    if to.kind == "latest":
        return end
    if to.kind == "timestamp":
        found = log_offsets(admin, partitions, OffsetSpec.for_timestamp(to.value))
        # No record at or after that time: the group starts at the end.
        return {tp: offset if offset >= 0 else end[tp] for tp, offset in found.items()}
    if to.kind == "offset":
        wanted = dict.fromkeys(partitions, to.value)
    else:
        committed = committed_offsets(admin, group)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise CliError(f"cannot shift {missing[0][0]}-{missing[0][1]}: group "
                           f"{group!r} has no committed offset there")
        wanted = {tp: committed[tp] + to.value for tp in partitions}
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
            failures.append(delete_failure(group, exc))
            continue
        print(f"Deleted consumer group {group}.")
    if failures:
        raise CliError("cannot delete group " + "; ".join(failures))
    return 0


def delete_failure(group: str, exc: KafkaException) -> str:
    """Why DeleteGroups refused a group, in words (the broker refuses groups with members)."""
    code = exc.args[0].code()
    if code == KafkaError.NON_EMPTY_GROUP:
        return f"{group!r} has active members"
    if code == KafkaError.GROUP_ID_NOT_FOUND:
        return f"{group!r} does not exist"
    return f"{group!r}: {kafka_error_text(exc)}"
