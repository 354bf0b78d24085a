"""Reaching the cluster: metadata lookups that fail fast and say why.

librdkafka retries unreachable brokers forever and reports each failure only as an
event, so without this a command would hang until some timeout and then print a
generic "transport failure". Here the first metadata request doubles as a
connectivity check that gives up as soon as every bootstrap broker is known down.
"""

from __future__ import annotations

import re
import time
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ClusterMetadata, TopicMetadata

from gregor.cli.errors import CliError

METADATA_TIMEOUT_S = 10.0
_ATTEMPT_S = 0.5
_CONNECTION_ERRORS = frozenset({
    KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._AUTHENTICATION, KafkaError._SSL})
# librdkafka's connection errors read "host:port/bootstrap: Connect to ... failed: Connection
# refused (after 0ms in state CONNECT)": the broker name is already in our message and the
# state suffix only matters to librdkafka developers.
_LIBRDKAFKA_DECORATION = re.compile(r"^\S+/(?:bootstrap|\d+): | \(after \d+ms in state \w+\)$")
# Metadata answers that mean "try again shortly": a topic just auto-created has no leader yet.
_TRANSIENT_TOPIC_ERRORS = frozenset({
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION})


class MetadataClient(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...

    def poll(self, timeout: float = -1) -> object: ...


class ConnectionWatch:
    """librdkafka ``error_cb``: remembers why the brokers cannot be reached."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.connection_error: str | None = None
        self.all_brokers_down = False
        self.fatal_error: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_brokers_down = True
        elif error.code() in _CONNECTION_ERRORS:
            self.connection_error = _LIBRDKAFKA_DECORATION.sub("", error.str())
        elif error.code() == KafkaError._BAD_MSG:  # e.g. an HTTP server on that port
            self.connection_error = ("it does not answer in the Kafka protocol ("
                                     + _LIBRDKAFKA_DECORATION.sub("", error.str()) + ")")
        if error.fatal():
            self.fatal_error = error

    def check(self) -> None:
        """Raise if librdkafka declared the client unusable (e.g. a fatal idempotence error)."""
        if self.fatal_error is not None:
            raise CliError(self.fatal_error.str())

    def unreachable(self, detail: str) -> CliError:
        return CliError(f"cannot reach a broker at {self.bootstrap}: "
                        f"{self.connection_error or detail}")


def cluster_metadata(client: MetadataClient, watch: ConnectionWatch, topic: str | None = None,
                     timeout: float = METADATA_TIMEOUT_S) -> ClusterMetadata:
    """Metadata for all topics (or one), or a CliError once the brokers are known unreachable.

    Asking a producer for one topic's metadata may auto-create it, as with any
    Kafka producer; consumers and admin clients never do.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.list_topics(topic, timeout=_ATTEMPT_S)
        except KafkaException as exc:
            detail = exc.args[0].str()
        client.poll(0)  # serves error_cb, which tells a refused connection from a slow one
        watch.check()
        if watch.all_brokers_down or time.monotonic() >= deadline:
            raise watch.unreachable(detail)


def topic_metadata(client: MetadataClient, watch: ConnectionWatch, topic: str,
                   timeout: float = METADATA_TIMEOUT_S) -> TopicMetadata:
    """One topic's metadata, waiting out a freshly created topic's leader election."""
    deadline = time.monotonic() + timeout
    while True:
        found = cluster_metadata(client, watch, topic, timeout).topics.get(topic)
        if found is None:
            raise CliError(f"unknown topic {topic!r}")
        error = found.error
        if error is None:
            return found
        if error.code() in _TRANSIENT_TOPIC_ERRORS and time.monotonic() < deadline:
            time.sleep(0.1)
            continue
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CliError(f"unknown topic {topic!r}")
        raise CliError(f"topic {topic!r}: {error.str()}")


def require_partition(topic: TopicMetadata, partition: int) -> None:
    if partition not in topic.partitions:
        raise CliError(f"topic {topic.topic!r} has no partition {partition} "
                       f"(it has {len(topic.partitions)})")
