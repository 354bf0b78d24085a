"""Reassignment plans: kafka-reassign-partitions.sh's JSON, and the plans
``gregor cluster reassign --generate``, ``add-broker`` and ``drain`` propose.

A plan is ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..],
"log_dirs":["any",..]}]}``, so plans move between the two tools; a ``log_dirs`` entry
other than ``any`` names the directory of the replica at the same position. ``--generate``
places every partition of the topics afresh, as Kafka's tool does (its replica
placement: leaders round-robin, one replica per rack where racks allow);
``add-broker`` and ``drain`` move as few replicas as they can instead: off the
brokers that hold more than their share (or that are being drained) onto those
holding least, keeping each replica's position (so a leader's replica is replaced
by the new preferred leader) and preferring a rack the partition does not use yet.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Collection, Mapping

from gregor.cli.errors import CliError
from gregor.cluster.election import AssignmentError, assign_replicas

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, tuple[int, ...]]
# Per broker, the directories its replicas must be in (a plan's log_dirs but "any").
LogDirs = dict[int, dict[TopicPartition, str]]


def format_plan(assignment: Mapping[TopicPartition, tuple[int, ...]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": index, "replicas": list(replicas),
         "log_dirs": ["any"] * len(replicas)}
        for (topic, index), replicas in sorted(assignment.items())]}, separators=(",", ":"))


def parse_plan(text: str) -> Assignment:
    """A plan's target replicas per partition; CliError for anything else."""
    try:
        raw = json.loads(text)
        entries = raw["partitions"]
        plan = {(str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
                for e in entries}
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"not a reassignment plan ({exc!r}): expected "
                       '{"version":1,"partitions":[{"topic":..,"partition":..,'
                       '"replicas":[..]}]}') from None
    for entry in entries:
        dirs = entry.get("log_dirs")
        if dirs is not None and len(dirs) != len(entry["replicas"]):
            raise CliError(f"{entry['topic']}-{entry['partition']}: log_dirs and replicas "
                           "must be as long")
    if len(plan) != len(entries):
        raise CliError("the plan names a partition twice")
    return plan


def parse_log_dirs(text: str) -> LogDirs:
    """The directories a plan (already checked by ``parse_plan``) names."""
    wanted: LogDirs = {}
    for entry in json.loads(text)["partitions"]:
        for broker, path in zip(entry["replicas"], entry.get("log_dirs") or (), strict=False):
            if path != "any":
                wanted.setdefault(int(broker), {})[str(entry["topic"]),
                                                   int(entry["partition"])] = str(path)
    return wanted


def generate(current: Assignment, brokers: Collection[int],
             racks: Mapping[int, str | None]) -> Assignment:
    """Every partition of the topics in ``current`` placed afresh on ``brokers``, each
    topic keeping its replication factor."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in current:
        by_topic.setdefault(topic, []).append(index)
    placement = {b: racks.get(b) for b in brokers}
    plan: Assignment = {}
    for topic, indexes in sorted(by_topic.items()):
        replication = len(current[topic, indexes[0]])
        try:
            placed = assign_replicas(len(indexes), replication, placement)
        except AssignmentError as exc:
            raise CliError(f"{topic}: {exc}") from None
        for index, replicas in zip(sorted(indexes), placed, strict=True):
            plan[topic, index] = replicas
    return plan


def rebalanced(current: Assignment, brokers: Collection[int],
               racks: Mapping[int, str | None]) -> Assignment:
    """The partitions whose replicas must move so that every replica is on ``brokers``
    and no broker holds more than its share, moving as few as that takes; each with its
    new replica list (partitions that stay are left out)."""
    brokers = sorted(brokers)
    if not brokers:
        raise CliError("no broker to place replicas on")
    load: Counter[int] = Counter({b: 0 for b in brokers})
    for held in current.values():
        load.update(r for r in held if r in load)
    total = sum(len(r) for r in current.values())
    ceiling, floor = math.ceil(total / len(brokers)), total // len(brokers)
    # Leaderships (first replicas) are balanced the same way, so a new broker leads its
    # share rather than every partition whose first replica happened to move.
    leads: Counter[int] = Counter({b: 0 for b in brokers})
    leads.update(r[0] for r in current.values() if r and r[0] in leads)
    lead_ceiling = math.ceil(len(current) / len(brokers))
    lead_floor = len(current) // len(brokers)
    plan: Assignment = {}
    for tp in sorted(current):
        replicas = list(current[tp])
        for position, replica in enumerate(current[tp]):
            leaving = replica not in load
            if not leaving and load[replica] <= ceiling:
                continue
            used_racks = {racks.get(r) for r in replicas if r != replica}
            candidates = sorted((b for b in brokers if b not in replicas),
                                key=lambda b: (racks.get(b) in used_racks, load[b], b))
            if not candidates:
                if leaving:
                    raise CliError(f"{tp[0]}-{tp[1]}: no broker left for its replica on "
                                   f"{replica} (replication factor {len(replicas)}, "
                                   f"{len(brokers)} broker(s))")
                continue
            taker = candidates[0]
            if not leaving and (load[taker] >= floor or position == 0 and (
                    leads[replica] <= lead_ceiling or leads[taker] >= lead_floor)):
                continue
            replicas[position] = taker
            load[taker] += 1
            if not leaving:
                load[replica] -= 1
            if position == 0:
                leads[taker] += 1
                leads[replica] -= 1
        if tuple(replicas) != current[tp]:
            plan[tp] = tuple(replicas)
    return plan
