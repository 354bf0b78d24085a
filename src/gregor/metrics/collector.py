"""The broker's metrics as Prometheus families, built when Prometheus scrapes.

Counters come from :class:`~gregor.metrics.broker_metrics.BrokerMetrics`; gauges are
read from the broker's state at that moment: its partitions' logs and ISRs, the
cluster metadata, the groups it coordinates. Group lag is each committed offset's
distance to the partition's high watermark (what a consumer can read, and what
ListOffsets answers for the latest offset), for the partitions this broker hosts;
lead is its distance from the log start.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gregor.metrics import names
from gregor.metrics.broker_metrics import BrokerMetrics, Histogram
from gregor.metrics.loop_monitor import LoopMonitor
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


class BrokerCollector(Collector):
    def __init__(self, broker: Broker, metrics: BrokerMetrics, loop: LoopMonitor) -> None:
        self.broker = broker
        self.metrics = metrics
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield from self._requests()
        yield from self._event_loop()
        yield from self._logs()
        yield from self._replicas()
        yield from self._controller()
        yield from self._groups()

    # ------------------------------------------------------------- counters
    def _topic_counters(self) -> Iterator[Metric]:
        existing = self.broker.image.topics
        for topic in [t for t in self.metrics.topics if t not in existing]:
            self.metrics.retire(topic)
        topics = self.metrics.topics
        for name, doc, field in (
                (names.MESSAGES_IN, "records appended, by topic and in all", "messages_in"),
                (names.BYTES_IN, "bytes of record batches appended from producers", "bytes_in"),
                (names.BYTES_OUT, "bytes of record batches sent to consumers", "bytes_out")):
            # As the exporter renders Kafka's meters: one series per topic, and the
            # broker's total without a topic label.
            family = Metric(name, doc, "counter")
            total = getattr(self.metrics.retired, field)
            for topic, counters in topics.items():
                value = getattr(counters, field)
                total += value
                family.add_sample(name + "_total", {"topic": topic}, value)
            family.add_sample(name + "_total", {}, total)
            yield family
        yield CounterMetricFamily(names.REPLICATION_BYTES_OUT,
                                  "bytes of record batches sent to follower replicas",
                                  value=self.metrics.replication_bytes_out)

    def _requests(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(names.REQUESTS, "requests answered, by API and version",
                                       labels=["request", "version"])
        errors = CounterMetricFamily(
            names.ERRORS, "answers by API and error code (per partition for Produce and "
            "Fetch, NONE included)", labels=["request", "error"])
        total_time = HistogramMetricFamily(
            names.TOTAL_TIME_MS, "time from a request's arrival to its answer sent, in ms",
            labels=["request"])
        queue_time = HistogramMetricFamily(
            names.REQUEST_QUEUE_TIME_MS,
            "time a received request waited for the ones before it on its connection, in ms",
            labels=["request"])
        for request, counters in sorted(self.metrics.requests.items()):
            for version, count in sorted(counters.by_version.items()):
                requests.add_metric([request, str(version)], count)
            for code, count in sorted(counters.errors.items()):
                errors.add_metric([request, _error_name(code)], count)
            _add_histogram(total_time, request, counters.total_time)
            _add_histogram(queue_time, request, counters.queue_time)
        yield from (requests, errors, total_time, queue_time)

    def _event_loop(self) -> Iterator[Metric]:
        ratio = self.loop.idle_ratio
        if ratio is not None:
            yield GaugeMetricFamily(
                names.NETWORK_PROCESSOR_IDLE,
                "share of the last 10 s the event loop waited for sockets (0 to 1)", ratio)
        idle = self.loop.idle_seconds
        if idle is not None:
            yield CounterMetricFamily(names.LOOP_IDLE_SECONDS,
                                      "time the event loop spent waiting for sockets", idle)
        yield GaugeMetricFamily(names.LOOP_LAG_SECONDS,
                                "how late the event loop ran its latest timer", self.loop.lag_s)

    # ---------------------------------------------------------------- state
    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {
            names.LOG_SIZE: GaugeMetricFamily(names.LOG_SIZE, "bytes of the partition's log",
                                              labels=labels),
            names.LOG_START_OFFSET: GaugeMetricFamily(
                names.LOG_START_OFFSET, "first offset of the partition's log", labels=labels),
            names.LOG_END_OFFSET: GaugeMetricFamily(
                names.LOG_END_OFFSET, "offset the next record appended gets", labels=labels),
            names.LOG_SEGMENTS: GaugeMetricFamily(
                names.LOG_SEGMENTS, "segments of the partition's log", labels=labels),
        }
        for (topic, index), partition in sorted(self.broker.replica_manager.partitions.items()):
            log = partition.log
            key = [topic, str(index)]
            families[names.LOG_SIZE].add_metric(key, log.size)
            families[names.LOG_START_OFFSET].add_metric(key, log.log_start_offset)
            families[names.LOG_END_OFFSET].add_metric(key, log.log_end_offset)
            families[names.LOG_SEGMENTS].add_metric(key, len(log.segments))
        yield from families.values()

    def _replicas(self) -> Iterator[Metric]:
        replica_manager = self.broker.replica_manager
        partitions = replica_manager.partitions
        per_partition = GaugeMetricFamily(
            names.PARTITION_UNDER_REPLICATED,
            "1 if this broker leads the partition and a replica is out of its ISR",
            labels=["topic", "partition"])
        under = under_min = leaders = 0
        for (topic, index), partition in sorted(partitions.items()):
            if not partition.is_leader:
                continue
            leaders += 1
            lagging = len(partition.isr) < len(partition.replicas)
            under += lagging
            under_min += partition.is_under_min_isr
            per_partition.add_metric([topic, str(index)], int(lagging))
        yield GaugeMetricFamily(names.UNDER_REPLICATED,
                                "partitions led here with a replica out of the ISR", under)
        yield GaugeMetricFamily(names.UNDER_MIN_ISR,
                                "partitions led here with an ISR below min.insync.replicas",
                                under_min)
        yield per_partition
        yield GaugeMetricFamily(names.PARTITION_COUNT, "partitions hosted here", len(partitions))
        yield GaugeMetricFamily(names.LEADER_COUNT, "partitions led here", leaders)
        yield CounterMetricFamily(names.ISR_SHRINKS, "ISR shrinks of partitions led here",
                                  replica_manager.isr_shrinks)
        yield CounterMetricFamily(names.ISR_EXPANDS, "ISR expansions of partitions led here",
                                  replica_manager.isr_expands)

    def _controller(self) -> Iterator[Metric]:
        broker = self.broker
        image = broker.image
        cluster = broker.cluster
        # Alone, a broker is its cluster's controller.
        active = cluster is None or cluster.controller.is_active
        yield GaugeMetricFamily(names.ACTIVE_CONTROLLER,
                                "1 on the cluster's active controller, 0 elsewhere", int(active))
        offline = 0
        if active:
            live = set(image.brokers)
            offline = sum(1 for topic in image.topics.values() for state in topic.partitions
                          if state.partition_epoch >= 0 and state.leader not in live)
        yield GaugeMetricFamily(names.OFFLINE_PARTITIONS,
                                "partitions without a live leader (on the active controller)",
                                offline)
        yield GaugeMetricFamily(names.GLOBAL_TOPICS, "topics in the cluster (controller)",
                                len(image.topics) if active else 0)
        yield GaugeMetricFamily(names.GLOBAL_PARTITIONS,
                                "partitions in the cluster (controller)",
                                sum(len(t.partitions) for t in image.topics.values())
                                if active else 0)
        elections = unclean = 0
        if cluster is not None:
            elections = cluster.controller.leader_elections
            unclean = cluster.controller.unclean_leader_elections
        yield _counter_named(names.LEADER_ELECTIONS,
                             "leader elections decided by this broker as controller", elections)
        yield CounterMetricFamily(names.UNCLEAN_LEADER_ELECTIONS,
                                  "elections of a leader that was out of sync", unclean)

    def _groups(self) -> Iterator[Metric]:
        groups = self.broker.group_coordinator.groups
        by_state: dict[str, int] = dict.fromkeys(names.GROUP_STATES, 0)
        group_labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(names.GROUP_CURRENT_OFFSET,
                                    "committed offset of a group at a partition",
                                    labels=group_labels)
        lag = GaugeMetricFamily(names.GROUP_LAG,
                                "high watermark minus the committed offset", labels=group_labels)
        lead = GaugeMetricFamily(names.GROUP_LEAD,
                                 "committed offset minus the log start offset",
                                 labels=group_labels)
        current_sum = GaugeMetricFamily(names.GROUP_CURRENT_OFFSET_SUM,
                                        "committed offsets of a group at a topic, summed",
                                        labels=["consumergroup", "topic"])
        lag_sum = GaugeMetricFamily(names.GROUP_LAG_SUM, "lag of a group at a topic, summed",
                                    labels=["consumergroup", "topic"])
        members = GaugeMetricFamily(names.GROUP_MEMBERS, "members of a group",
                                    labels=["consumergroup"])
        offsets = 0
        partitions = self.broker.replica_manager.partitions
        for group_id, group in sorted(groups.items()):
            by_state[group.state.value] += 1
            offsets += len(group.offsets)
            members.add_metric([group_id], len(group.members))
            sums: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
            for (topic, index), committed in sorted(group.offsets.items()):
                key = [group_id, topic, str(index)]
                current.add_metric(key, committed.offset)
                sums[topic][0] += committed.offset
                partition = partitions.get((topic, index))
                if partition is None:
                    continue  # hosted elsewhere: its offsets are not known here
                behind = max(0, partition.high_watermark - committed.offset)
                lag.add_metric(key, behind)
                lead.add_metric(key, max(0, committed.offset - partition.log_start_offset))
                sums[topic][1] += behind
            for topic, (offset_sum, behind_sum) in sorted(sums.items()):
                current_sum.add_metric([group_id, topic], offset_sum)
                lag_sum.add_metric([group_id, topic], behind_sum)
        yield GaugeMetricFamily(names.NUM_GROUPS, "groups coordinated here", len(groups))
        for state, count in by_state.items():
            yield GaugeMetricFamily(names.num_groups_in(state),
                                    f"groups coordinated here in state {state}", count)
        yield GaugeMetricFamily(names.NUM_OFFSETS, "committed offsets held here", offsets)
        yield from (current, current_sum, lag, lag_sum, lead, members)


def _add_histogram(family: HistogramMetricFamily, request: str, histogram: Histogram) -> None:
    family.add_metric([request], histogram.cumulative(), histogram.total)


def _counter_named(sample_name: str, doc: str, value: float) -> Metric:
    """A counter whose one sample has exactly ``sample_name`` (Kafka timers' ``_count``,
    which prometheus_client would otherwise suffix with ``_total``)."""
    family = Metric(sample_name, doc, "counter")
    family.add_sample(sample_name, {}, value)
    return family
