"""What the console shows and does to a cluster, as plain data for its JSON API.

Every call is bounded: admin requests by ``socket.timeout.ms`` (librdkafka's default
for an admin request's timeout), metadata by the command line's fail-fast lookup,
futures by an explicit wait. A broker that is down therefore costs a page at most
``CALL_TIMEOUT_S`` and an error in words, never a hung request. Failures are
``CliError``s worded as the command line words them.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
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

from gregor.cli.client_config import client_config
from gregor.cli.cluster_cmd import unhealthy_partitions
from gregor.cli.cluster_metadata import (
    ConnectionWatch,
    cluster_metadata,
    require_partition,
    topic_metadata,
)
from gregor.cli.errors import CliError, kafka_error_text
from gregor.cli.groups_cmd import (
    STATE_NAMES,
    ResetTo,
    assignment_text,
    commit_offsets,
    committed_offsets,
    delete_failure,
    describe_group,
    log_offsets,
    partition_lags,
    require_inactive,
    reset_partitions,
    reset_targets,
)
from gregor.cli.reassign_cmd import moves_in_progress
from gregor.config import ConfigError, parse_metrics_listener

CALL_TIMEOUT_S = 10.0
_PROBE_S = 1.0
CLIENT_DEFAULTS: dict[str, Any] = {
    # librdkafka's admin requests time out after socket.timeout.ms unless told otherwise.
    "socket.timeout.ms": int(CALL_TIMEOUT_S * 1000),
    # A console stays up while brokers come and go: notice a returning one quickly.
    "reconnect.backoff.max.ms": 1000,
}
# The configs the topic list shows; every other one is on the topic's own page.
LISTED_CONFIGS = ("retention.ms", "retention.bytes", "cleanup.policy")
SIZE_UNAVAILABLE = ("Size needs DescribeLogDirs, which the Kafka client library used here "
                    "(librdkafka) does not offer, or the brokers' metrics, which are not "
                    "configured (gregor console --metrics URL); records (log end minus log "
                    "start offset) are shown instead.")


class RequestError(ValueError):
    """Input the console refuses before asking the cluster (HTTP 400)."""


class NotFound(LookupError):
    """A topic or group that does not exist (HTTP 404)."""


def wait(future: Future, what: str) -> Any:
    """A future's result within CALL_TIMEOUT_S, failures as ``cannot <what>: <why>``."""
    try:
        return future.result(timeout=CALL_TIMEOUT_S)
    except KafkaException as exc:
        raise CliError(f"cannot {what}: {kafka_error_text(exc)}") from None
    except FutureTimeout:
        raise CliError(f"cannot {what}: no answer within {CALL_TIMEOUT_S:g} s") from None


class ClusterAdmin:
    """One admin client and one producer for the console's lifetime (both thread-safe);
    group requests get an admin client each (``group_client``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        config, self.watch = client_config(args, CLIENT_DEFAULTS)
        self._config = config
        self.bootstrap = self.watch.bootstrap
        self.admin = AdminClient(config)
        self.producer = Producer({**config, "acks": "all",
                                  "message.timeout.ms": int(CALL_TIMEOUT_S * 1000)})
        # Each move's bytes left when last shown (monotonic time, bytes), for its rate.
        self._moves_seen: dict[tuple[str, int], tuple[float, int]] = {}
        self._moves_lock = threading.Lock()

    def client_config(self, defaults: Mapping[str, Any]) -> tuple[dict[str, Any], ConnectionWatch]:
        """Configuration for a short-lived client (a consumer), with its own watch."""
        return client_config(self.args, {**CLIENT_DEFAULTS, **defaults})

    def group_client(self) -> AdminClient:
        """An admin client for one group request (describe, committed offsets, reset,
        delete), dropped after it.

        librdkafka aborts the whole process on an assertion when a long-lived client's
        group request times out around a broker restart (confluentinc/librdkafka#4605,
        open); a client per request is the workaround its reporters use, and costs a
        connection.
        """
        return AdminClient(self._config)

    def metadata(self) -> ClusterMetadata:
        try:
            metadata = cluster_metadata(self.admin, self.watch, timeout=_PROBE_S)
        except CliError:
            # A refused connection since the last answer: the cluster is down, say so now.
            # librdkafka's "all brokers down" event, which cluster_metadata waits for,
            # does not come again for a client that saw the brokers return.
            if self.watch.connection_error is not None:
                raise
            metadata = cluster_metadata(self.admin, self.watch, timeout=CALL_TIMEOUT_S)
        # The watch remembers the last outage; a broker answering again ends it, so that a
        # later failure is reported by its own cause.
        self.watch.all_brokers_down = False
        self.watch.connection_error = None
        return metadata

    def metrics_urls(self) -> list[str]:
        """Where each broker serves its Prometheus metrics, from its own
        ``metrics.listener`` (DescribeConfigs of the broker, as Kafka exposes any broker
        config), a wildcard host taken as the broker's own address. Brokers without
        one or with port 0 (the port it chose is not in its config), and those that do
        not answer, are left out. One call per broker, all sent at once: librdkafka
        refuses a call naming two brokers (_CONFLICT), which left a cluster with none."""
        metadata = self.metadata()
        futures: dict[ConfigResource, Any] = {}
        for broker in metadata.brokers:
            futures.update(self.admin.describe_configs(
                [ConfigResource(ResourceType.BROKER, str(broker))],
                request_timeout=CALL_TIMEOUT_S))
        urls = []
        for resource, future in futures.items():
            try:
                entries: Mapping[str, ConfigEntry] = wait(
                    future, f"describe broker {resource.name}")
                listener = parse_metrics_listener(entries["metrics.listener"].value or "")
            except (CliError, KeyError, ConfigError):
                continue
            if listener is None or listener[1] == 0:
                continue  # none, or a port the broker chose, which its config does not say
            host, port, path = listener
            if host in ("", "0.0.0.0", "::"):
                host = str(metadata.brokers[int(resource.name)].host)
            urls.append(f"http://{f'[{host}]' if ':' in host else host}:{port}{path}")
        return sorted(urls)

    # ---------------------------------------------------------------- cluster
    def cluster(self) -> dict[str, Any]:
        metadata = self.metadata()
        described = wait(self.admin.describe_cluster(request_timeout=CALL_TIMEOUT_S),
                         "describe the cluster")
        controller = described.controller.id if described.controller is not None else None
        under, offline = unhealthy_partitions(metadata)
        topics = _existing_topics(metadata)
        return {
            "cluster_id": described.cluster_id,
            "controller": controller,
            "brokers": [{"id": node.id, "host": node.host, "port": node.port,
                         "rack": node.rack, "controller": node.id == controller}
                        for node in sorted(described.nodes, key=lambda n: n.id)],
            "topics": len(topics),
            "partitions": sum(len(metadata.topics[name].partitions) for name in topics),
            "under_replicated": [_partition(metadata, *tp) for tp in under],
            "offline": [_partition(metadata, *tp) for tp in offline],
            **self._reassignments(metadata, described),
        }

    def _reassignments(self, metadata: ClusterMetadata, described: Any) -> dict[str, Any]:
        """Partition reassignments in progress, each with its bytes moved and left and
        the rate since it was last shown (ListPartitionReassignments and DescribeLogDirs,
        as ``gregor cluster add-broker`` shows them); or why they cannot be listed."""
        if described.controller is None:
            return {"reassignments": None, "reassignments_note": "The cluster has no "
                    "controller now."}
        addresses = {n.id: f"{n.host}:{n.port}" for n in described.nodes}
        leaders = {(name, index): p.leader for name, topic in metadata.topics.items()
                   for index, p in topic.partitions.items()}
        try:
            moves = moves_in_progress(addresses, addresses[described.controller.id], leaders)
        except CliError as exc:
            return {"reassignments": None, "reassignments_note": f"Reassignments cannot be "
                    f"listed (the requests go unencrypted to each broker): {exc}"}
        now = time.monotonic()
        rows = []
        with self._moves_lock:
            seen, self._moves_seen = self._moves_seen, {}
            for move in moves:
                tp = (move.topic, move.partition)
                self._moves_seen[tp] = (now, move.left)
                before = seen.get(tp)
                rate = (None if before is None or now <= before[0]
                        else max(0.0, (before[1] - move.left) / (now - before[0])))
                adding = len(move.adding)
                rows.append({"topic": move.topic, "partition": move.partition,
                             "replicas": move.replicas, "adding": move.adding,
                             "removing": move.removing, "size": move.size * adding,
                             "moved": max(0, move.size * adding - move.left),
                             "left": move.left, "rate": rate})
        return {"reassignments": rows}

    # ----------------------------------------------------------------- topics
    def topics(self) -> list[dict[str, Any]]:
        metadata = self.metadata()
        names = _existing_topics(metadata)
        start, end = self._log_range(metadata, names)
        configs = self._configs(names)
        rows = []
        for name in names:
            partitions = metadata.topics[name].partitions
            listed = configs.get(name, {})
            rows.append({
                "name": name,
                "internal": name.startswith("__"),
                "partitions": len(partitions),
                "replication_factor": max((len(p.replicas) for p in partitions.values()),
                                          default=0),
                "under_replicated": sum(1 for p in partitions.values()
                                        if p.leader >= 0 and len(p.isrs) < len(p.replicas)),
                "offline": sum(1 for p in partitions.values() if p.leader < 0),
                "records": sum(end[(name, p)] - start[(name, p)] for p in partitions
                               if (name, p) in end),
                "size": None,
                **{key: listed[key]["value"] for key in LISTED_CONFIGS if key in listed},
            })
        return rows

    def topic(self, name: str) -> dict[str, Any]:
        metadata = self.metadata()
        if name not in _existing_topics(metadata):
            raise NotFound(f"unknown topic {name!r}")
        start, end = self._log_range(metadata, [name])
        partitions = []
        for index in sorted(metadata.topics[name].partitions):
            row = _partition(metadata, name, index)
            row["log_start"] = start.get((name, index))
            row["log_end"] = end.get((name, index))
            partitions.append(row)
        return {"name": name, "internal": name.startswith("__"), "partitions": partitions,
                "configs": self._configs([name])[name]}

    def _log_range(self, metadata: ClusterMetadata, names: list[str]
                   ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        # An offline partition (no leader) has no offsets to list.
        partitions = [(name, index) for name in names
                      for index, p in metadata.topics[name].partitions.items() if p.leader >= 0]
        return (log_offsets(self.admin, partitions, OffsetSpec.earliest()),
                log_offsets(self.admin, partitions, OffsetSpec.latest()))

    def _configs(self, names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
        if not names:
            return {}
        futures = self.admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, name) for name in names],
            request_timeout=CALL_TIMEOUT_S)
        configs = {}
        for resource, future in futures.items():
            entries: Mapping[str, ConfigEntry] = wait(future, f"describe {resource.name!r}")
            configs[resource.name] = {name: _config(entry)
                                      for name, entry in sorted(entries.items())}
        return configs

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> None:
        self.metadata()  # a cluster that is down fails here at once, in words
        new_topic = NewTopic(name, num_partitions=partitions,
                             replication_factor=replication_factor, config=dict(configs))
        futures = self.admin.create_topics([new_topic], request_timeout=CALL_TIMEOUT_S)
        wait(futures[name], f"create topic {name!r}")

    def delete_topic(self, name: str) -> None:
        self.metadata()
        futures = self.admin.delete_topics([name], request_timeout=CALL_TIMEOUT_S)
        wait(futures[name], f"delete topic {name!r}")

    def add_partitions(self, name: str, total: int) -> None:
        self.metadata()
        futures = self.admin.create_partitions([NewPartitions(name, total)],
                                               request_timeout=CALL_TIMEOUT_S)
        wait(futures[name], f"add partitions to {name!r}")

    def alter_configs(self, name: str, set_configs: Mapping[str, str],
                      delete_configs: list[str]) -> None:
        """Set and remove topic overrides in one IncrementalAlterConfigs request."""
        changes = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                   for key, value in set_configs.items()]
        changes += [ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
                    for key in delete_configs]
        if not changes:
            raise RequestError("no config to change")
        self.metadata()
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=changes)
        for future in self.admin.incremental_alter_configs(
                [resource], request_timeout=CALL_TIMEOUT_S).values():
            wait(future, f"alter configs of {name!r}")

    # --------------------------------------------------------------- produce
    def produce(self, topic: str, partition: int | None, key: bytes | None,
                value: bytes | None, headers: list[tuple[str, bytes]]) -> dict[str, Any]:
        """One record, acknowledged by all in-sync replicas; where it landed."""
        found = topic_metadata(self.admin, self.watch, topic, timeout=CALL_TIMEOUT_S)
        if partition is not None:
            require_partition(found, partition)
        done = threading.Event()
        outcome: list[tuple[KafkaError | None, Message]] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            outcome.append((error, message))
            done.set()

        extra: dict[str, Any] = {"headers": headers} if headers else {}
        if partition is not None:
            extra["partition"] = partition
        try:
            self.producer.produce(topic, value, key, on_delivery=delivered, **extra)
        except (KafkaException, BufferError) as exc:
            raise CliError(f"cannot produce to {topic!r}: {exc}") from None
        # message.timeout.ms bounds the delivery report; the margin covers the poll.
        deadline = time.monotonic() + CALL_TIMEOUT_S + 5
        while not done.is_set() and time.monotonic() < deadline:
            self.producer.poll(0.1)
        if not outcome:
            raise CliError(f"cannot produce to {topic!r}: no acknowledgement in time")
        error, message = outcome[0]
        if error is not None:
            raise CliError(f"cannot produce to {topic!r}: {error.str()}")
        return {"partition": message.partition(), "offset": message.offset(),
                "timestamp": message.timestamp()[1]}

    # ----------------------------------------------------------------- groups
    def groups(self) -> list[dict[str, Any]]:
        self.metadata()  # a cluster that is down fails here at once, in words
        listed = wait(self.admin.list_consumer_groups(request_timeout=CALL_TIMEOUT_S),
                      "list groups")
        if listed.errors:
            raise CliError(f"cannot list groups: {listed.errors[0]}")
        ids = sorted(group.group_id for group in listed.valid)
        if not ids:
            return []
        groups = self.group_client()
        described = groups.describe_consumer_groups(ids, request_timeout=CALL_TIMEOUT_S)
        committed = {group: committed_offsets(groups, group) for group in ids}
        ends = log_offsets(self.admin, {tp for offsets in committed.values() for tp in offsets},
                           OffsetSpec.latest())
        rows = []
        for group in ids:
            description = wait(described[group], f"describe {group!r}")
            offsets = committed[group]
            rows.append({
                "id": group,
                "state": STATE_NAMES.get(description.state, str(description.state)),
                "members": len(description.members),
                "topics": sorted({topic for topic, _ in offsets}),
                "lag": sum(max(ends[tp] - offset, 0) for tp, offset in offsets.items()),
                "coordinator": description.coordinator.id,
            })
        return rows

    def group(self, group: str) -> dict[str, Any]:
        self.metadata()
        groups = self.group_client()
        description = describe_group(groups, group)
        if description is None:
            raise NotFound(f"consumer group {group!r} does not exist")
        return {
            "id": group,
            "state": STATE_NAMES.get(description.state, str(description.state)),
            "assignor": description.partition_assignor or None,
            "coordinator": description.coordinator.id,
            "members": [{"member_id": m.member_id, "instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.host,
                         "assignment": assignment_text(m.assignment.topic_partitions)}
                        for m in description.members],
            "partitions": [{"topic": row.topic, "partition": row.partition,
                            "committed": row.committed, "log_start": row.log_start,
                            "log_end": row.log_end, "lag": row.lag, "lead": row.lead,
                            "member_id": row.owner.member_id if row.owner else None,
                            "client_id": row.owner.client_id if row.owner else None}
                           for row in partition_lags(groups, group, description)],
        }

    def reset_offsets(self, group: str, topics: list[str], to: ResetTo,
                      execute: bool) -> list[dict[str, Any]]:
        """New offsets per partition (``topics`` as ``TOPIC`` or ``TOPIC:P,P``), committed
        only when ``execute``; refused while the group has members, as the command is."""
        metadata = self.metadata()
        groups = self.group_client()
        require_inactive(groups, group)
        partitions = reset_partitions(metadata, topics)
        targets = reset_targets(groups, group, partitions, to)
        before = committed_offsets(groups, group)
        if execute:
            commit_offsets(groups, group, targets)
        return [{"topic": topic, "partition": partition, "previous": before.get((topic, partition)),
                 "offset": offset} for (topic, partition), offset in targets.items()]

    def delete_group(self, group: str) -> None:
        self.metadata()
        groups = self.group_client()  # kept until the answer: dropping it drops the request
        future = groups.delete_consumer_groups([group], request_timeout=CALL_TIMEOUT_S)[group]
        try:
            future.result(timeout=CALL_TIMEOUT_S)
        except KafkaException as exc:
            raise CliError(f"cannot delete group {delete_failure(group, exc)}") from None
        except FutureTimeout:
            raise CliError(f"cannot delete group {group!r}: no answer within "
                           f"{CALL_TIMEOUT_S:g} s") from None


def _existing_topics(metadata: ClusterMetadata) -> list[str]:
    return sorted(name for name, topic in metadata.topics.items() if topic.error is None)


def _partition(metadata: ClusterMetadata, topic: str, index: int) -> dict[str, Any]:
    """A partition as ``gregor topics describe`` shows it; offline replicas are those on
    brokers that are not live (Metadata lists live brokers only)."""
    partition = metadata.topics[topic].partitions[index]
    return {"topic": topic, "partition": index,
            "leader": partition.leader if partition.leader >= 0 else None,
            "replicas": list(partition.replicas), "isr": list(partition.isrs),
            "offline_replicas": [r for r in partition.replicas if r not in metadata.brokers]}


def _config(entry: ConfigEntry) -> dict[str, Any]:
    return {"value": None if entry.is_sensitive else entry.value,
            "source": ConfigSource(entry.source).name,
            "override": entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
            "read_only": entry.is_read_only, "sensitive": entry.is_sensitive}
