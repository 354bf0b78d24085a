"""A blocking Kafka client for one task: the leader of one partition, found through the
bootstrap servers, and Fetch and ListOffsets requests to it.

Executors read record batches as the broker stores them, so they speak the protocol
themselves (requests and responses encoded by kio through :mod:`gregor.protocol.codec`)
rather than through a consumer library that hands out one object per record.  A task
reads one partition, one request at a time, except that the next Fetch may be sent
before the answer to the previous one has been used (:meth:`BrokerConnection.send`).
"""

from __future__ import annotations

import dataclasses
import datetime
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.list_offsets.v7 import request as list_offsets_request
from kio.schema.metadata.v12 import request as metadata_request

from gregor.client.connection import (
    BrokerConnection,
    BrokerUnavailable,
    ClientSettings,
    bootstrap_connection,
    client_security,
    parse_bootstrap,
    security_options,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode

FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 7
METADATA_VERSION = 12
CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class FetchSettings(ClientSettings):
    """The consumer settings a Fetch uses, named as in Kafka's clients (``kafka.`` options);
    the defaults are librdkafka's, except the larger per-partition size, which lets one
    request carry a good share of a micro-batch."""

    client_id: str = "gregor-spark"
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52_428_800
    partition_max_bytes: int = 8 << 20
    isolation_level: int = READ_UNCOMMITTED
    retry_backoff_ms: int = 100

    security_config: tuple[tuple[str, str], ...] = ()
    """The ``security.protocol``, ``ssl.*`` and ``sasl.*`` options ``security`` comes from:
    an SSL context cannot be pickled, so tasks carry these and make their own."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "security": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.security_config:
            object.__setattr__(self, "security", client_security(dict(self.security_config)))

    @classmethod
    def from_config(cls, config: dict[str, str]) -> FetchSettings:
        """From the ``kafka.*`` options (librdkafka's names: :func:`client_security` for
        TLS and SASL); other options are the AdminClient's and the producer's."""
        security_config = tuple(sorted(security_options(config).items()))
        try:
            security = client_security(dict(security_config))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"the kafka.ssl.* options cannot be used: {exc}") from None
        level = config.get("isolation.level", "read_uncommitted").lower()
        if level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"kafka.isolation.level must be read_uncommitted or "
                             f"read_committed, got {level!r}")
        numbers = {
            "max_wait_ms": "fetch.wait.max.ms",
            "min_bytes": "fetch.min.bytes",
            "max_bytes": "fetch.max.bytes",
            "partition_max_bytes": "max.partition.fetch.bytes",
            "socket_timeout_ms": "socket.timeout.ms",
            "retry_backoff_ms": "retry.backoff.ms",
        }
        given: dict[str, Any] = {}
        for field_name, option in numbers.items():
            if option in config:
                try:
                    given[field_name] = int(config[option])
                except ValueError:
                    raise ValueError(f"kafka.{option} must be an integer, "
                                     f"got {config[option]!r}") from None
        if "client.id" in config:
            given["client_id"] = config["client.id"]
        return cls(
            bootstrap=parse_bootstrap(config["bootstrap.servers"]),
            isolation_level=READ_COMMITTED if level == "read_committed" else READ_UNCOMMITTED,
            security=security, security_config=security_config if security else (),
            **given,
        )


class PartitionLeader:
    """The connection to one partition's current leader, found (again) through metadata
    whenever the caller says the last one is gone or no longer leads."""

    def __init__(self, topic: str, partition: int, settings: FetchSettings) -> None:
        self.topic = topic
        self.partition = partition
        self.settings = settings
        self.epoch = -1
        self._connection: BrokerConnection | None = None

    @property
    def connection(self) -> BrokerConnection:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def forget(self) -> None:
        """Drop the connection: the next request asks the metadata where the leader is."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def send_fetch(self, offset: int) -> None:
        s = self.settings
        partition = build(fetch_request.FetchPartition, partition=self.partition,
                          current_leader_epoch=self.epoch, fetch_offset=offset,
                          last_fetched_epoch=-1, log_start_offset=-1,
                          partition_max_bytes=s.partition_max_bytes)
        body = build(fetch_request.FetchRequest, cluster_id=None, replica_id=CONSUMER_REPLICA_ID,
                     max_wait=datetime.timedelta(milliseconds=s.max_wait_ms),
                     min_bytes=s.min_bytes, max_bytes=s.max_bytes,
                     isolation_level=s.isolation_level, session_id=0, session_epoch=-1,
                     topics=(build(fetch_request.FetchTopic, topic=self.topic,
                                   partitions=(partition,)),),
                     forgotten_topics_data=(), rack_id="")
        self.connection.send(ApiKey.FETCH, FETCH_VERSION, body)

    def receive_fetch(self) -> Any:
        """This partition's data in the answer to the oldest fetch sent."""
        answer = self.connection.receive()
        for topic in answer.responses:
            for data in topic.partitions:
                if topic.topic == self.topic and data.partition_index == self.partition:
                    if answer.error_code != ErrorCode.none:
                        return _with_error(data, answer.error_code)
                    return data
        raise BrokerUnavailable(f"the fetch answer has no {self.topic}-{self.partition} "
                                f"({ErrorCode(answer.error_code).name})")

    def list_offset(self, timestamp: int) -> int:
        """Kafka's ListOffsets for this partition: -2 for the log start, -1 for its end."""
        s = self.settings
        body = build(list_offsets_request.ListOffsetsRequest, replica_id=CONSUMER_REPLICA_ID,
                     isolation_level=s.isolation_level,
                     topics=(build(list_offsets_request.ListOffsetsTopic, name=self.topic,
                                   partitions=(build(list_offsets_request.ListOffsetsPartition,
                                                     partition_index=self.partition,
                                                     current_leader_epoch=self.epoch,
                                                     timestamp=timestamp),)),))
        answer = self.connection.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        found = answer.topics[0].partitions[0]
        if found.error_code != ErrorCode.none:
            raise BrokerUnavailable(f"{self.topic}-{self.partition}: ListOffsets answered "
                                    f"{ErrorCode(found.error_code).name}")
        return int(found.offset)

    def close(self) -> None:
        self.forget()

    def _connect(self) -> BrokerConnection:
        connection = bootstrap_connection(self.settings)
        try:
            leader = self._leader(connection)
        finally:
            connection.close()
        return BrokerConnection(leader, self.settings)

    def _leader(self, connection: BrokerConnection) -> tuple[str, int]:
        answer = connection.request(ApiKey.METADATA, METADATA_VERSION,
                                    metadata_body([self.topic], create=False))
        brokers = {b.node_id: (b.host, int(b.port)) for b in answer.brokers}
        for topic in answer.topics:
            if topic.name != self.topic:
                continue
            if topic.error_code != ErrorCode.none:
                raise BrokerUnavailable(
                    f"{self.topic}: metadata says {ErrorCode(topic.error_code).name}")
            for p in topic.partitions:
                if p.partition_index == self.partition and p.leader_id in brokers:
                    self.epoch = int(p.leader_epoch)
                    return brokers[p.leader_id]
        raise BrokerUnavailable(f"{self.topic}-{self.partition} has no live leader in metadata")


def metadata_body(topics: Sequence[str], create: bool) -> Any:
    """A Metadata request for ``topics``, auto-creating them if ``create`` (and the
    broker allows it)."""
    return build(metadata_request.MetadataRequest,
                 topics=tuple(build(metadata_request.MetadataRequestTopic, topic_id=None,
                                    name=name) for name in topics),
                 allow_auto_topic_creation=create, include_topic_authorized_operations=False)


def _with_error(data: Any, error_code: int) -> Any:
    """A request-level error applies to the partition: report it as the partition's."""
    return dataclasses.replace(data, error_code=ErrorCode(error_code))
