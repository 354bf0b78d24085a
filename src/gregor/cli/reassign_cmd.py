"""``gregor cluster reassign``, ``add-broker`` and ``drain``: moving partitions' replicas.

``reassign`` is kafka-reassign-partitions.sh's: ``--generate`` proposes a plan for
``--topics`` over ``--brokers`` (printing the current assignment first, to roll back
with), ``--execute`` starts a plan, ``--verify`` tells which of its partitions are
done, ``--cancel`` stops them (their original replicas stay), ``--list`` shows every
move in progress. ``add-broker N`` moves a share of every topic's replicas onto a
new broker, ``drain N`` moves every replica off one; both wait for the moves,
printing bytes moved, bytes left and the rate as they go. A plan's ``log_dirs`` move
replicas between a broker's directories too, as kafka-reassign-partitions.sh does it:
asked of each broker before the reassignment starts (so a new replica is created
there) and again until each broker took them; ``--verify`` checks them.

librdkafka has no reassignment calls, so AlterPartitionReassignments,
ListPartitionReassignments and DescribeLogDirs go over a socket of their own to the
controller (and to each broker, for sizes), unencrypted; the cluster's layout comes
from confluent-kafka's admin client with the usual client settings.
"""

from __future__ import annotations

import argparse
import datetime
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.index import load_payload_module
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i32, i32Timedelta

from gregor.cli import log_dirs_cmd, wire
from gregor.cli.client_config import add_client_arguments, client_config, described_cluster
from gregor.cli.errors import CliError, kafka_error_text
from gregor.cli.progress import Progress
from gregor.cli.reassign_plan import (
    Assignment,
    LogDirs,
    TopicPartition,
    format_plan,
    generate,
    parse_log_dirs,
    parse_plan,
    rebalanced,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

_CLIENT_ID = "gregor-reassign"
_TIMEOUT_S = 30.0
_POLL_S = 1.0
_ALTER_VERSION, _LIST_VERSION = 0, 0
# How long --execute asks brokers to take a plan's log_dirs (Kafka's --timeout default).
_LOG_DIRS_WAIT_S = 10.0


def add_actions(actions: argparse._SubParsersAction) -> None:
    """The ``gregor cluster`` actions that move replicas."""
    reassign = actions.add_parser(
        "reassign", help="move partitions' replicas (kafka-reassign-partitions.sh's plans)")
    mode = reassign.add_mutually_exclusive_group(required=True)
    for flag, text in (("--generate", "propose a plan for --topics over --brokers"),
                       ("--execute", "start the plan in --reassignment-json-file"),
                       ("--verify", "which partitions of the plan are done"),
                       ("--cancel", "cancel the plan's moves still in progress"),
                       ("--list", "every move in progress")):
        mode.add_argument(flag, action="store_true", help=text)
    reassign.add_argument("--topics", help="comma-separated topics (--generate)")
    reassign.add_argument("--brokers", help="comma-separated broker ids (--generate)")
    reassign.add_argument("--reassignment-json-file", type=Path, metavar="PLAN.json",
                          help="the plan (--execute, --verify, --cancel)")
    reassign.add_argument("--throttle", type=int, metavar="BYTES/S",
                          help="with --execute: bound the moves' replication to this rate "
                               "(--verify removes the throttles once the plan is done)")
    add_client_arguments(reassign)
    reassign.set_defaults(run=run_reassign)
    for name, text in (("add-broker", "move a share of every topic's replicas onto broker N"),
                       ("drain", "move every replica off broker N")):
        action = actions.add_parser(name, help=text)
        action.add_argument("broker", type=int, metavar="N")
        action.add_argument("--topics", help="only these topics (comma-separated)")
        action.add_argument("--no-wait", action="store_true",
                            help="start the moves and return")
        add_client_arguments(action)
        action.set_defaults(run=run_add_broker if name == "add-broker" else run_drain)


# ------------------------------------------------------------------- the cluster
@dataclass
class _Cluster:
    addresses: dict[int, str]
    racks: dict[int, str | None]
    controller: int
    assignment: Assignment
    leaders: dict[TopicPartition, int]

    @property
    def controller_address(self) -> str:
        if self.controller not in self.addresses:
            raise CliError("the cluster has no controller now")
        return self.addresses[self.controller]


def _cluster(args: argparse.Namespace) -> _Cluster:
    metadata, described = described_cluster(args, _TIMEOUT_S)
    assignment, leaders = {}, {}
    for name, topic in metadata.topics.items():
        if name.startswith("__"):
            continue
        for index, partition in topic.partitions.items():
            assignment[name, index] = tuple(partition.replicas)
            leaders[name, index] = partition.leader
    return _Cluster({n.id: f"{n.host}:{n.port}" for n in described.nodes},
                    {n.id: n.rack for n in described.nodes},
                    described.controller.id if described.controller is not None else -1,
                    assignment, leaders)


def _ids(text: str | None, flag: str) -> list[int]:
    if not text:
        raise CliError(f"{flag} is required")
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise CliError(f"{flag} takes comma-separated broker ids, got {text!r}") from None


def _selected(cluster: _Cluster, topics: str | None) -> Assignment:
    if topics is None:
        return dict(cluster.assignment)
    names = [t.strip() for t in topics.split(",") if t.strip()]
    missing = [t for t in names if not any(tp[0] == t for tp in cluster.assignment)]
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(missing)}")
    return {tp: r for tp, r in cluster.assignment.items() if tp[0] in names}


# ------------------------------------------------------------------ the requests
def _module(api_key: ApiKey, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def alter(cluster: _Cluster, targets: dict[TopicPartition, tuple[int, ...] | None]
          ) -> dict[TopicPartition, str | None]:
    """Send AlterPartitionReassignments to the controller: each partition's error, or
    None where the move was started (or cancelled)."""
    schema = _module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, _ALTER_VERSION)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), target in sorted(targets.items()):
        by_topic.setdefault(topic, []).append(schema.ReassignablePartition(
            partition_index=i32(index),
            replicas=None if target is None else tuple(BrokerId(r) for r in target)))
    body = schema.AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=_TIMEOUT_S)),
        topics=tuple(schema.ReassignableTopic(name=TopicName(topic), partitions=tuple(parts))
                     for topic, parts in by_topic.items()))
    answer = wire.request(cluster.controller_address, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                          _ALTER_VERSION, body, _CLIENT_ID, timeout_s=_TIMEOUT_S)
    if answer.error_code != ErrorCode.none:
        raise CliError(f"{answer.error_code.name}: {answer.error_message or ''}".strip())
    return {(t.name, p.partition_index): None if p.error_code == ErrorCode.none
            else f"{p.error_code.name}: {p.error_message or ''}".strip()
            for t in answer.responses for p in t.partitions}


def ongoing(cluster: _Cluster) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    return ongoing_at(cluster.controller_address)


def ongoing_at(controller_address: str
               ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments: every move in progress, (replicas, adding, removing)."""
    schema = _module(ApiKey.LIST_PARTITION_REASSIGNMENTS, _LIST_VERSION)
    answer = wire.request(controller_address, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                          _LIST_VERSION, schema.ListPartitionReassignmentsRequest(topics=None),
                          _CLIENT_ID, timeout_s=_TIMEOUT_S)
    if answer.error_code != ErrorCode.none:
        raise CliError(f"{answer.error_code.name}: {answer.error_message or ''}".strip())
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                          list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


def partition_sizes(addresses: dict[int, str]) -> dict[tuple[int, TopicPartition], int]:
    """Each broker's size on disk of each partition it holds (DescribeLogDirs)."""
    sizes = {}
    for broker_id, address in addresses.items():
        try:
            answer = log_dirs_cmd.describe(address)
        except CliError:
            continue  # a broker gone: its sizes are unknown
        for result in answer.results:
            for topic in result.topics:
                for partition in topic.partitions:
                    if not partition.is_future_key:  # a copy between directories
                        sizes[broker_id, (topic.name, partition.partition_index)] = int(
                            partition.partition_size)
    return sizes


@dataclass(frozen=True, slots=True)
class Move:
    """A reassignment in progress, and how far its new replicas have come."""

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    size: int  # the leader's replica, in bytes
    left: int  # what the adding replicas still lack of it, in bytes


def moves_in_progress(addresses: dict[int, str], controller_address: str,
                      leaders: dict[TopicPartition, int]) -> list[Move]:
    """Every move in progress with its bytes left: the leader's size against each
    adding replica's (what ``add-broker``, ``drain`` and the web console show)."""
    in_progress = ongoing_at(controller_address)
    sizes = partition_sizes(addresses) if in_progress else {}
    moves = []
    for (topic, index), (replicas, adding, removing) in sorted(in_progress.items()):
        full = sizes.get((leaders.get((topic, index), -1), (topic, index)), 0)
        left = sum(max(0, full - sizes.get((b, (topic, index)), 0)) for b in adding)
        moves.append(Move(topic, index, replicas, adding, removing, full, left))
    return moves


def move_log_dirs(cluster: _Cluster, wanted: LogDirs, until: float
                  ) -> dict[tuple[TopicPartition, int], ErrorCode]:
    """AlterReplicaLogDirs to each broker of ``wanted``, again while some replica is
    not there yet (REPLICA_NOT_AVAILABLE) until ``until``: each replica's last answer."""
    answers: dict[tuple[TopicPartition, int], ErrorCode] = {}
    pending = {broker: dict(moves) for broker, moves in wanted.items()}
    while True:
        for broker, moves in list(pending.items()):
            if broker not in cluster.addresses:
                answers.update({(tp, broker): ErrorCode.broker_not_available for tp in moves})
                del pending[broker]
                continue
            for tp, error in log_dirs_cmd.alter(cluster.addresses[broker], moves).items():
                answers[tp, broker] = error
                if error != ErrorCode.replica_not_available:
                    moves.pop(tp, None)
            if not moves:
                del pending[broker]
        if not pending or time.monotonic() >= until:
            return answers
        time.sleep(0.5)


# -------------------------------------------------------------------- commands
def run_reassign(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if args.generate:
        if not args.topics:
            raise CliError("--topics is required")
        current = _selected(cluster, args.topics)
        brokers = _ids(args.brokers, "--brokers")
        unknown = [b for b in brokers if b not in cluster.addresses]
        if unknown:
            raise CliError(f"unknown broker(s): {unknown}")
        print("Current partition replica assignment")
        print(format_plan(current))
        print()
        print("Proposed partition reassignment configuration")
        print(format_plan(generate(current, brokers, cluster.racks)))
        return 0
    if args.list:
        for (topic, index), (replicas, adding, removing) in sorted(ongoing(cluster).items()):
            print(f"{topic}-{index}: replicas {replicas}, adding {adding}, removing {removing}")
        return 0
    if args.reassignment_json_file is None:
        raise CliError("--reassignment-json-file is required")
    try:
        plan = parse_plan(args.reassignment_json_file.read_text())
    except OSError as exc:
        raise CliError(f"cannot read {args.reassignment_json_file}: {exc}") from None
    if args.execute:
        print("Current partition replica assignment")
        print(format_plan({tp: cluster.assignment[tp] for tp in plan
                           if tp in cluster.assignment}))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        if args.throttle is not None:
            set_throttles(args, cluster, plan, args.throttle)
            print(f"The inter-broker throughput limit was set to {args.throttle} B/s")
        wanted = parse_log_dirs(args.reassignment_json_file.read_text())
        # First, so that new replicas are created in their directories (Kafka's order).
        move_log_dirs(cluster, wanted, 0.0)
        status = _report(alter(cluster, dict(plan)), "Successfully started partition "
                                                     "reassignment(s) for")
        if wanted:
            answers = move_log_dirs(cluster, wanted, time.monotonic() + _LOG_DIRS_WAIT_S)
            started = sorted(key for key, error in answers.items() if error == ErrorCode.none)
            if started:
                print("Successfully started log directory move for: " + ", ".join(
                    f"{t}-{i}-{b}" for (t, i), b in started))
            for ((topic, index), broker), error in sorted(answers.items()):
                if error != ErrorCode.none:
                    status = 1
                    print(f"Error moving replica {topic}-{index}-{broker} between log "
                          f"directories: {error.name}")
        return status
    if args.cancel:
        in_progress = ongoing(cluster)
        return _report(alter(cluster, {tp: None for tp in plan if tp in in_progress}),
                       "Successfully cancelled partition reassignment(s) for")
    pending = _verify(cluster, plan) | _verify_log_dirs(
        cluster, parse_log_dirs(args.reassignment_json_file.read_text()))
    if not pending:
        set_throttles(args, cluster, plan, None)
        print("Clearing broker-level throttles and topic-level throttles")
    return pending


_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_LEADER_REPLICAS = "leader.replication.throttled.replicas"
_FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def set_throttles(args: argparse.Namespace, cluster: _Cluster, plan: Assignment,
                  rate: int | None) -> None:
    """As kafka-reassign-partitions.sh: ``rate`` on every broker of the cluster, and each
    topic's moving partitions listed, their current replicas as leaders and their new
    ones as followers; with None, all of that removed."""
    config, _ = client_config(args)
    admin = AdminClient(config)
    calls: list[ConfigResource] = []
    operation = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    for broker_id in sorted(cluster.addresses):  # one per call: each goes to its broker
        calls.append(ConfigResource("broker", str(broker_id), incremental_configs=[
            ConfigEntry(name, None if rate is None else str(rate),
                        incremental_operation=operation) for name in _RATES]))
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for (topic, index), target in sorted(plan.items()):
        current = cluster.assignment.get((topic, index), ())
        if tuple(target) == tuple(current):
            continue
        leaders.setdefault(topic, []).extend(f"{index}:{b}" for b in current)
        followers.setdefault(topic, []).extend(f"{index}:{b}" for b in target
                                               if b not in current)
    for topic in sorted(set(leaders) | {t for t, _ in plan}):
        entries = [(_LEADER_REPLICAS, leaders.get(topic)), (_FOLLOWER_REPLICAS,
                                                            followers.get(topic))]
        calls.append(ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry(name, None if rate is None else ",".join(listed or []),
                        incremental_operation=operation) for name, listed in entries]))
    for resource in calls:
        try:
            admin.incremental_alter_configs([resource])[resource].result(_TIMEOUT_S)
        except Exception as exc:  # KafkaException, or a timeout of the future
            raise CliError(f"cannot set the throttle on {resource.name}: "
                           f"{kafka_error_text(exc)}") from None


def _report(results: dict[TopicPartition, str | None], done: str) -> int:
    ok = sorted(tp for tp, error in results.items() if error is None)
    if ok:
        print(f"{done} {', '.join(f'{t}-{i}' for t, i in ok)}")
    for (topic, index), error in sorted(results.items()):
        if error is not None:
            print(f"Error reassigning partition {topic}-{index}: {error}")
    return 0 if len(ok) == len(results) else 1


def _verify(cluster: _Cluster, plan: Assignment) -> int:
    """Kafka's --verify lines; exit status 0 once every partition of the plan is done."""
    in_progress = ongoing(cluster)
    print("Status of partition reassignment:")
    pending = 0
    for tp in sorted(plan):
        topic, index = tp
        if tp in in_progress:
            pending += 1
            print(f"Reassignment of partition {topic}-{index} is still in progress.")
        elif cluster.assignment.get(tp) == plan[tp]:
            print(f"Reassignment of partition {topic}-{index} is completed.")
        else:
            pending += 1
            print(f"There is no active reassignment of partition {topic}-{index}, but "
                  f"replica set is {list(cluster.assignment.get(tp, ()))} rather than "
                  f"{list(plan[tp])}.")
    return 1 if pending else 0


def _verify_log_dirs(cluster: _Cluster, wanted: LogDirs) -> int:
    """Kafka's --verify lines for replicas a plan puts in given directories; 1 while
    one is not there yet."""
    pending = 0
    for broker, moves in sorted(wanted.items()):
        current: dict[TopicPartition, str] = {}
        future: dict[TopicPartition, str] = {}
        if broker in cluster.addresses:
            for result in log_dirs_cmd.describe(cluster.addresses[broker]).results:
                for topic in result.topics:
                    for p in topic.partitions:
                        found = future if p.is_future_key else current
                        found[topic.name, p.partition_index] = result.log_dir
        for (topic, index), path in sorted(moves.items()):
            replica = f"{topic}-{index}-{broker}"
            if current.get((topic, index)) == path:
                print(f"Reassignment of replica {replica} completed.")
                continue
            pending = 1
            if future.get((topic, index)) == path:
                print(f"Reassignment of replica {replica} is still in progress.")
            else:
                print(f"Partition {topic}-{index} on broker {broker} is not being moved from "
                      f"log dir {current.get((topic, index), '(none)')} to {path}.")
    return pending


def run_add_broker(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if args.broker not in cluster.addresses:
        raise CliError(f"broker {args.broker} is not registered: start it first")
    return _move(cluster, args, rebalanced(_selected(cluster, args.topics),
                                           sorted(cluster.addresses), cluster.racks))


def run_drain(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    others = sorted(set(cluster.addresses) - {args.broker})
    return _move(cluster, args, rebalanced(_selected(cluster, args.topics), others,
                                           cluster.racks))


def _move(cluster: _Cluster, args: argparse.Namespace, plan: Assignment) -> int:
    if not plan:
        print("Nothing to move.")
        return 0
    print(f"Moving {len(plan)} partition(s):")
    for (topic, index), replicas in sorted(plan.items()):
        print(f"  {topic}-{index}: {list(cluster.assignment[topic, index])} -> "
              f"{list(replicas)}")
    results = alter(cluster, dict(plan))
    failed = {tp: error for tp, error in results.items() if error is not None}
    for (topic, index), error in sorted(failed.items()):
        print(f"Error reassigning partition {topic}-{index}: {error}")
    if args.no_wait:
        return 1 if failed else 0
    moving = {tp: plan[tp] for tp in plan if tp not in failed}
    _follow(args, moving)
    return 1 if failed else 0


def _follow(args: argparse.Namespace, plan: Assignment) -> None:
    """Wait until none of ``plan``'s moves is in progress, printing bytes moved, bytes
    left and the rate every second: what the new replicas hold against their leaders."""
    progress = Progress(_POLL_S)
    started = time.monotonic()
    first_left: int | None = None
    while True:
        cluster = _cluster(args)
        in_progress = [m for m in moves_in_progress(cluster.addresses,
                                                    cluster.controller_address,
                                                    cluster.leaders)
                       if (m.topic, m.partition) in plan]
        left = sum(m.left for m in in_progress)
        first_left = left if first_left is None else max(first_left, left)
        moved = first_left - left
        elapsed = max(time.monotonic() - started, 1e-9)
        line = (f"{len(plan) - len(in_progress)}/{len(plan)} partition(s) done, "
                f"{moved / 1e6:.1f} MB moved, {left / 1e6:.1f} MB left, "
                f"{moved / 1e6 / elapsed:.1f} MB/s")
        if not in_progress:
            print(f"Done: {line}")
            return
        if progress.due():
            progress.report(line)
        time.sleep(_POLL_S)
