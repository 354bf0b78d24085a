"""The registry's Kafka client of ``_schemas``: one thread reads every record into the
state, writes are produced and wait until that reader has applied them.

Writes are answered from the state the topic rebuilds, never from what was meant to
be written, so an instance answers exactly what any other instance, or this one after
a restart, reads back. It uses only Kafka's APIs (confluent-kafka), so the registry
runs against any Kafka-compatible cluster.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from gregor.schemas import errors
from gregor.schemas.state import RegistryState

log = logging.getLogger(__name__)

TOPIC = "_schemas"
_POLL_S = 0.1
# Errors of a topic its leader has not opened yet, which list_offsets does not call retriable.
# (_NOENT: librdkafka found no leader for it in its metadata: not there yet, or a
# refusal it keeps, which _refresh_metadata clears.)
_NOT_THERE_YET = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._NOENT)


class SchemaTopic:
    """``_schemas`` read into ``state`` (changed only under ``changed``'s lock)."""

    def __init__(self, client_config: dict[str, Any], state: RegistryState,
                 changed: threading.Condition, topic: str = TOPIC,
                 timeout: float = 30.0) -> None:
        self.client_config = client_config
        self.state = state
        self.changed = changed
        self.topic = topic
        self.timeout = timeout
        self._stop = threading.Event()
        self._consumer = Consumer({**client_config, "group.id": "gregor-schema-registry",
                                   "enable.auto.commit": False,
                                   "enable.partition.eof": False,
                                   "fetch.wait.max.ms": 50})
        self._producer = Producer({**client_config, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 0})
        self._admin = AdminClient(client_config)
        self._reader = threading.Thread(target=self._read, name="schemas-reader", daemon=True)

    def start(self) -> None:
        """Create the topic if it is missing, then read it to its end."""
        self._create_topic()
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._reader.start()
        self.catch_up()

    def close(self) -> None:
        self._stop.set()
        if self._reader.is_alive():
            self._reader.join()
        self._consumer.close()
        self._producer.flush(5)

    def catch_up(self) -> None:
        """Wait until the state has applied every record written before this call (the
        partition's high watermark now): a new primary must have seen every id."""
        # Asked of an admin client: the reader's consumer blocks in consume meanwhile.
        partition = TopicPartition(self.topic, 0)
        deadline = time.monotonic() + self.timeout
        while True:
            futures = self._admin.list_offsets({partition: OffsetSpec.latest()},
                                               request_timeout=self.timeout)
            try:
                end = futures[partition].result(self.timeout).offset
                break
            except KafkaException as exc:
                # A topic just created: its leader may not have opened it yet
                # (UNKNOWN_TOPIC_OR_PARTITION, retriable in Kafka, though librdkafka's
                # list_offsets error does not say so: its code is checked).
                error = exc.args[0]
                if not (error.retriable() or error.code() in _NOT_THERE_YET) \
                        or time.monotonic() > deadline:
                    raise errors.store_error(f"reading the end of {self.topic}: {exc}") from None
                time.sleep(0.1)
                self._refresh_metadata(max(0.1, deadline - time.monotonic()))
        self._wait_applied(end)

    def _refresh_metadata(self, timeout: float) -> None:
        """Ask a broker for the topic again. librdkafka answers ``list_offsets`` from its
        metadata cache, where a broker's TOPIC_AUTHORIZATION_FAILED for the topic (one
        that had not yet read the ACLs allowing it) stays for minutes: every later
        ``list_offsets`` fails at once with ``_NOENT``, without asking, until the topic's
        metadata is asked for again."""
        with contextlib.suppress(KafkaException):
            self._admin.list_topics(self.topic, timeout=timeout)

    def write(self, key: bytes, value: bytes | None) -> None:
        """Produce one record and wait until the reader has applied it."""
        delivered: list[Any] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            delivered.append(err if err is not None else msg.offset())

        self._producer.produce(self.topic, key=key, value=value, partition=0,
                               on_delivery=on_delivery)
        deadline = time.monotonic() + self.timeout
        while not delivered:
            self._producer.poll(_POLL_S)
            if time.monotonic() > deadline:
                raise errors.store_timeout(f"writing to {self.topic}")
        if isinstance(delivered[0], KafkaError):
            raise errors.store_error(delivered[0].str())
        self._wait_applied(delivered[0] + 1)

    def _wait_applied(self, end: int) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.state.next_offset >= end,
                                         timeout=self.timeout):
                raise errors.store_timeout(
                    f"reading {self.topic} up to offset {end} (at {self.state.next_offset})")

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                # consume() waits out its whole timeout unless the batch fills: wait for
                # one record, then take what else is there at once.
                first = self._consumer.poll(_POLL_S)
                messages = [] if first is None else [first, *self._consumer.consume(500, 0)]
            except KafkaException as exc:
                log.warning("reading %s: %s", self.topic, exc)
                continue
            applied = [m for m in messages if m.error() is None]
            for message in messages:
                error = message.error()
                if error is not None and not error.retriable():
                    log.warning("reading %s: %s", self.topic, error)
            # Compaction leaves gaps, and a tombstone at the end may be gone: the read
            # position, not the last record, says how far the state has read.
            position = self._consumer.position([TopicPartition(self.topic, 0)])[0].offset
            if not applied and position <= self.state.next_offset:
                continue
            with self.changed:
                for message in applied:
                    self.state.apply(message.offset() or 0, message.key(), message.value())
                self.state.next_offset = max(self.state.next_offset, position)
                self.changed.notify_all()

    def _create_topic(self) -> None:
        """One partition (a total order of every change), compacted (the latest record
        per key is the state), replicated on up to three brokers, as Confluent's."""
        admin = self._admin
        brokers = admin.list_topics(timeout=self.timeout).brokers
        topic = NewTopic(self.topic, num_partitions=1,
                         replication_factor=max(1, min(3, len(brokers))),
                         config={"cleanup.policy": "compact"})
        future = admin.create_topics([topic], operation_timeout=self.timeout)[self.topic]
        try:
            future.result(self.timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
