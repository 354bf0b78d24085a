"""Driver-side questions to the cluster: which partitions exist, and where their logs
start and end or reach a timestamp.

One AdminClient answers all of them, because ``list_offsets`` asks each partition leader
once for a whole set of partitions (a consumer's ``get_watermark_offsets`` would cost one
round trip per partition, and it cannot take the isolation level as an argument).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from confluent_kafka import IsolationLevel
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from gregor.client.connection import (
    BrokerUnavailable,
    ClientSettings,
    bootstrap_connection,
    client_security,
    parse_bootstrap,
)
from gregor.spark.offsets import EARLIEST, LATEST, Offsets, TopicPartition, describe
from gregor.spark.options import (
    AtTimestamp,
    EarliestOrLatest,
    OffsetBound,
    SpecificOffsets,
    Subscription,
)

REQUEST_TIMEOUT_S = 30.0
READ_UNCOMMITTED = "read_uncommitted"
"""Spark's Kafka source reads with the Java client's default isolation level; so do we."""


def _check_login(client_config: dict[str, str]) -> None:
    """With SASL, log in once to a bootstrap server first: librdkafka retries refused
    credentials until its request times out and then says only "Broker transport
    failure", where Kafka's clients fail at once with the broker's reason
    (AuthenticationRefused). An unreachable server is left to librdkafka."""
    if not client_config.get("security.protocol", "").upper().startswith("SASL"):
        return
    settings = ClientSettings(parse_bootstrap(client_config["bootstrap.servers"]),
                              security=client_security(client_config))
    with contextlib.suppress(BrokerUnavailable):
        bootstrap_connection(settings).close()


class OffsetLookup:
    """Answers offset questions for one query; not picklable, so it lives on the driver only."""

    def __init__(self, client_config: dict[str, str]) -> None:
        # An admin client has no isolation level of its own: it is passed per request.
        level = client_config.get("isolation.level", READ_UNCOMMITTED).lower()
        config: dict[str, str | int | float | bool] = {
            name: value for name, value in client_config.items() if name != "isolation.level"}
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        _check_login(client_config)
        self._admin = AdminClient(config)

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions the subscription covers right now, sorted."""
        metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        counts = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }
        return subscription.select(counts)

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        """Log start offset per partition: data below it was deleted by retention."""
        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        """Log end offset (high watermark, or last stable offset for read_committed)."""
        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def resolve(
        self,
        bound: OffsetBound,
        tps: list[TopicPartition],
        *,
        starting: bool,
        fail_if_no_timestamp_match: bool,
    ) -> Offsets:
        """Concrete offsets for ``tps`` from a parsed ``startingX``/``endingX`` option.

        A timestamp with no record at or after it resolves to the log end, except for a
        starting bound whose ``startingOffsetsByTimestampStrategy`` is ``error`` (Spark).
        """
        if isinstance(bound, EarliestOrLatest):
            return self.earliest(tps) if bound.marker == EARLIEST else self.latest(tps)
        if isinstance(bound, SpecificOffsets):
            _check_covers(bound.offsets, tps, starting)
            wanted = {tp: bound.offsets[tp] for tp in tps}
            resolved = dict(wanted)
            resolved.update(self.earliest(tp for tp, o in wanted.items() if o == EARLIEST))
            resolved.update(self.latest(tp for tp, o in wanted.items() if o == LATEST))
            return resolved
        if isinstance(bound, AtTimestamp):
            timestamps = dict.fromkeys(tps, bound.timestamp_ms)
        else:
            _check_covers(bound.timestamps, tps, starting)
            timestamps = {tp: bound.timestamps[tp] for tp in tps}
        found = self._list_offsets(
            {tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}
        )
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched and starting and fail_if_no_timestamp_match:
            raise ValueError(
                "no record at or after the starting timestamp in "
                + ", ".join(f"{describe(tp)} (timestamp {timestamps[tp]})" for tp in unmatched)
                + "; set startingOffsetsByTimestampStrategy=latest to start at the end instead"
            )
        found.update(self.latest(unmatched))
        return found

    def _list_offsets(self, specs: dict[TopicPartition, OffsetSpec]) -> Offsets:
        if not specs:
            return {}
        futures = self._admin.list_offsets(
            {KafkaTopicPartition(t, p): spec for (t, p), spec in specs.items()},
            isolation_level=self._isolation,
            request_timeout=REQUEST_TIMEOUT_S,
        )
        return {(k.topic, k.partition): f.result().offset for k, f in futures.items()}


def _check_covers(given: Offsets, tps: list[TopicPartition], starting: bool) -> None:
    """Spark requires per-partition JSON to name exactly the subscribed partitions, so a
    typo or a partition added since the job was written fails loudly instead of silently
    reading from a default position."""
    missing = sorted(set(tps) - set(given))
    unknown = sorted(set(given) - set(tps))
    if missing or unknown:
        side = "starting" if starting else "ending"
        raise ValueError(
            f"per-partition {side} offsets/timestamps must name every subscribed partition "
            "(use -2 for earliest, -1 for latest); "
            f"missing: {[describe(tp) for tp in missing]}, "
            f"not subscribed: {[describe(tp) for tp in unknown]}"
        )
