"""The plans of ``gregor cluster reassign``/``add-broker``/``drain``, without a cluster:
kafka-reassign-partitions.sh's JSON, balance, racks, and how few replicas move."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from gregor.cli.errors import CliError
from gregor.cli.reassign_plan import (
    format_plan,
    generate,
    parse_log_dirs,
    parse_plan,
    rebalanced,
)

# Twelve partitions of RF 3 on brokers 1-3: every broker holds all twelve.
THREE = {("t", i): (1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3) for i in range(12)}


def load(assignment) -> Counter[int]:
    return Counter(r for replicas in assignment.values() for r in replicas)


def test_plans_are_kafkas_json() -> None:
    text = format_plan({("t", 1): (2, 3), ("t", 0): (1, 2)})
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}
    assert parse_plan(text) == {("t", 0): (1, 2), ("t", 1): (2, 3)}
    # As kafka-reassign-partitions.sh writes it (no log_dirs).
    assert parse_plan('{"version":1,"partitions":[{"topic":"a","partition":0,'
                      '"replicas":[3]}]}') == {("a", 0): (3,)}
    for bad in ("[]", '{"partitions":[{"topic":"a"}]}', "nope",
                '{"partitions":[{"topic":"a","partition":0,"replicas":[1],'
                '"log_dirs":["/a","/b"]}]}'):
        with pytest.raises(CliError):
            parse_plan(bad)
    # Directories named for some replicas (kafka-reassign-partitions.sh's log_dirs).
    named = ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],'
             '"log_dirs":["/d1","any"]},{"topic":"a","partition":1,"replicas":[2]}]}')
    assert parse_plan(named) == {("a", 0): (1, 2), ("a", 1): (2,)}
    assert parse_log_dirs(named) == {1: {("a", 0): "/d1"}}


def test_add_broker_moves_only_its_share_onto_it() -> None:
    plan = rebalanced(THREE, [1, 2, 3, 4], {})
    after = {**THREE, **plan}
    assert load(after) == {1: 9, 2: 9, 3: 9, 4: 9}
    assert len(plan) == 9  # one replica of nine partitions moves; nothing else
    for tp, replicas in plan.items():
        assert len(set(replicas)) == 3 and 4 in replicas
        assert sum(a != b for a, b in zip(THREE[tp], replicas, strict=True)) == 1
    # The new broker leads its share too (a moved replica keeps its position).
    assert 2 <= Counter(r[0] for r in after.values())[4] <= 4


def test_drain_moves_every_replica_off_the_broker() -> None:
    four = {**THREE, **rebalanced(THREE, [1, 2, 3, 4], {})}
    plan = rebalanced(four, [1, 2, 3], {})
    after = {**four, **plan}
    assert 4 not in load(after) and load(after) == {1: 12, 2: 12, 3: 12}
    assert set(plan) == {tp for tp, r in four.items() if 4 in r}
    with pytest.raises(CliError):  # RF 3 cannot fit on two brokers
        rebalanced(THREE, [1, 2], {})


def test_moves_prefer_a_rack_the_partition_does_not_use() -> None:
    racks = {1: "a", 2: "b", 3: "b", 4: "c"}
    current = {("t", 0): (1, 2)}
    # Draining 1: 4 (rack c) rather than 3 (rack b, where 2 already is).
    assert rebalanced(current, [2, 3, 4], racks) == {("t", 0): (4, 2)}


def test_generate_places_every_partition_evenly_across_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    plan = generate(THREE, [1, 2, 3, 4], racks)
    assert set(plan) == set(THREE)
    assert load(plan) == {1: 9, 2: 9, 3: 9, 4: 9}
    assert Counter(r[0] for r in plan.values()) == {1: 3, 2: 3, 3: 3, 4: 3}
    for replicas in plan.values():
        assert {racks[r] for r in replicas} == {"a", "b"}
    with pytest.raises(CliError):
        generate(THREE, [1, 2], {})
