"""Consumers for the consumer-group tests, used the way applications use them.

A group member must keep polling to take part in rebalances, so each
:class:`PollingConsumer` polls in its own thread and records what it is assigned
and what it receives; :class:`ConsumerProcess` runs one in a child process so a
test can ``kill -9`` it. Run as a script, this module is that child.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

TIMEOUT = 30.0
# Fast group settings so tests need seconds, not Kafka's default minutes.
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
              "topic.metadata.refresh.interval.ms": 1000}


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT,
               what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def subscribe_when_known(consumer: KafkaConsumer, topics: list[str]) -> None:
    """Subscribe a kafka-python consumer once it knows the topics' partitions.

    A leader that assigned without them (kafka-python logs "No partition metadata")
    rejoins when they arrive, for that reason alone; and if kafka-python 3.0.12 gets that
    JoinGroup's answer between two polls, it never finishes the join: the answer itself
    clears the reason, so poll() stops waiting on the join, and the heartbeat it switched
    off for the join stays off. The member then gets no partitions until the coordinator
    expires it (CI saw this in the group tests and after a broker restart).
    """
    wait_until(lambda: all(consumer.partitions_for_topic(topic) for topic in topics),
               what=f"metadata of {', '.join(topics)}")
    consumer.subscribe(topics)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    """``count`` records valued ``b"<n>"`` from ``start``, spread round-robin over partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(start, start + count):
        producer.produce(topic, value=b"%d" % n, partition=n % partitions)
    assert producer.flush(TIMEOUT) == 0


def group_consumer(bootstrap: str, group: str, **config: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", **FAST_GROUP, **config})


class PollingConsumer:
    """A confluent-kafka group member polled by a thread of its own.

    With ``commit_each`` it commits every record synchronously after "processing"
    it (and never automatically), so a record whose commit succeeded is one the group
    must never deliver again. What went wrong is kept apart so tests can assert on it:
    ``errors`` holds the errors poll() reported, ``commit_failures`` the commits the
    coordinator refused. librdkafka's statistics (every 100 ms) show what a test cannot
    see from outside: the requests it sent and the rebalances it went through.
    """

    def __init__(self, bootstrap: str, group: str, topics: list[str], *,
                 commit_each: bool = False, **config: object) -> None:
        if commit_each:
            config["enable.auto.commit"] = False
        self.consumer = group_consumer(bootstrap, group, **{
            "statistics.interval.ms": 100, "stats_cb": self._on_stats, **config})
        self.client_id = str(config.get("client.id", "rdkafka"))
        self.commit_each = commit_each
        self.values: list[bytes] = []
        self.committed_values: set[bytes] = set()
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.assign_calls = 0
        self.revoke_calls = 0
        self.revoked: list[frozenset[tuple[str, int]]] = []
        self.errors: list[KafkaError] = []
        self.commit_failures: list[KafkaError] = []
        self._stats: dict = {}
        self._stop = threading.Event()
        self._stalled = threading.Event()
        self._lock = threading.Lock()
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assign_calls += 1

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoke_calls += 1
        self.revoked.append(frozenset((tp.topic, tp.partition) for tp in partitions))

    def _on_stats(self, stats: str) -> None:
        self._stats = json.loads(stats)

    def fresh_stats(self) -> None:
        """Wait for statistics taken after this call. Those at hand may be up to an
        interval old (more under load), so counters read just after an event may miss
        it and count it later. Their ``ts`` is librdkafka's clock, CLOCK_MONOTONIC in
        microseconds, as is ``time.monotonic()``."""
        now = time.monotonic() * 1_000_000
        wait_until(lambda: self._stats.get("ts", 0) > now, what="statistics taken from now")

    def requests_sent(self, request: str) -> int:
        """How many ``request`` requests (librdkafka's names: "Heartbeat", "Fetch", ...)
        this member has sent, over all its connections, by its latest statistics."""
        return sum(broker.get("req", {}).get(request, 0)
                   for broker in self._stats.get("brokers", {}).values())

    def fetch_position(self, topic: str, partition: int) -> int:
        """The offset librdkafka fetches from next; -1 until it is fetching (before,
        while it looks up the committed offset or resets, the number means nothing)."""
        partitions = self._stats.get("topics", {}).get(topic, {}).get("partitions", {})
        state = partitions.get(str(partition), {})
        return state["next_offset"] if state.get("fetch_state") == "active" else -1

    def rebalances(self) -> int:
        """librdkafka's count of the assignments and revocations this member went through."""
        return self._stats.get("cgrp", {}).get("rebalance_cnt", 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._stalled.is_set():
                time.sleep(0.05)
                continue
            message = self.consumer.poll(0.05)
            self.assignment = frozenset((tp.topic, tp.partition)
                                        for tp in self.consumer.assignment())
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    self.errors.append(message.error())
                continue
            with self._lock:
                self.values.append(message.value())
            if self.commit_each:
                try:
                    self.consumer.commit(message=message, asynchronous=False)
                except KafkaException as exc:
                    # Expected while the group rebalances (REBALANCE_IN_PROGRESS,
                    # ILLEGAL_GENERATION): the record is simply not committed.
                    self.commit_failures.append(exc.args[0])
                else:
                    with self._lock:
                        self.committed_values.add(message.value())

    def stall(self) -> None:
        """Stop calling poll(), as an application stuck processing a record would."""
        self._stalled.set()

    def partitions(self) -> set[int]:
        return {partition for _, partition in self.assignment}

    def received(self) -> list[bytes]:
        with self._lock:
            return list(self.values)

    def close(self) -> None:
        """Stop polling and leave the group (LeaveGroup, unless the member is static)."""
        self._stop.set()
        self._thread.join(TIMEOUT)
        self.consumer.close()


# What a commit may meet while the group rebalances under it: the record is then not
# committed, and the group delivers it again (to this member or another).
REBALANCE_COMMIT_ERRORS = frozenset({KafkaError.REBALANCE_IN_PROGRESS,
                                     KafkaError.ILLEGAL_GENERATION,
                                     KafkaError.UNKNOWN_MEMBER_ID})


def assert_no_errors(consumers: list[PollingConsumer]) -> None:
    """No member's poll() reported an error, and every refused commit was refused
    because the group was rebalancing."""
    assert [e for c in consumers for e in c.errors] == []
    assert [e for c in consumers for e in c.commit_failures
            if e.code() not in REBALANCE_COMMIT_ERRORS] == []


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset of each partition (-1001 where there is none)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                   for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT)
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


def wait_for_assignments(consumers: list[PollingConsumer], partitions: int,
                         sizes: list[int] | None = None, timeout: float = TIMEOUT) -> None:
    """Wait until the members hold every partition exactly once (in these sizes, if given)."""
    def settled() -> bool:
        held = [c.partitions() for c in consumers]
        everything = sorted(p for h in held for p in h)
        return everything == list(range(partitions)) and (
            sizes is None or sorted(len(h) for h in held) == sorted(sizes))
    wait_until(settled, timeout, f"{partitions} partitions shared as {sizes} by "
               f"{len(consumers)} consumers")


class ConsumerProcess:
    """A group member in a child process, reporting its assignment on stdout."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        # It never commits: whatever it consumed must reach another member after a kill.
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), bootstrap, group, topic],
            stdout=subprocess.PIPE, text=True)
        self.assignment: set[int] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.assignment = set(json.loads(line))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(TIMEOUT)


def _child(bootstrap: str, group: str, topic: str) -> None:
    consumer = group_consumer(bootstrap, group, **{"enable.auto.commit": False})
    consumer.subscribe([topic])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reported = None
    while not stop.is_set():
        consumer.poll(0.05)
        current = sorted(tp.partition for tp in consumer.assignment())
        if current != reported:
            print(json.dumps(current), flush=True)
            reported = current
    consumer.close()


if __name__ == "__main__":
    _child(*sys.argv[1:4])
