"""A scrape's :class:`~gregor.metrics.snapshot.Snapshot` as Prometheus metric families.

This runs in a worker thread, on values copied from the broker, never on the broker
itself. Group lag is each committed offset's distance to the partition's high
watermark (what a consumer can read, and what ListOffsets answers for the latest
offset), for the partitions this broker hosts; lead is its distance from the log start.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gregor.metrics import names
from gregor.metrics.broker_metrics import TIME_BUCKETS_MS
from gregor.metrics.snapshot import HistogramView, Snapshot
from gregor.protocol.errors import ErrorCode

_BOUNDS = (*map(repr, TIME_BUCKETS_MS), "+Inf")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

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
        snapshot = self.snapshot
        # In the order of TopicCounters' fields.
        for column, (name, doc) in enumerate((
                (names.MESSAGES_IN, "records appended, by topic and in all"),
                (names.BYTES_IN, "bytes of record batches appended from producers"),
                (names.BYTES_OUT, "bytes of record batches sent to consumers"),
                (names.TOTAL_PRODUCE_REQUESTS, "partitions asked for in produce requests"),
                (names.FAILED_PRODUCE_REQUESTS,
                 "partitions of produce requests failed (not for a moved leader or an "
                 "unknown partition, as in Kafka)"),
                (names.TOTAL_FETCH_REQUESTS, "partitions asked for in fetch requests"),
                (names.FAILED_FETCH_REQUESTS,
                 "partitions of fetch requests failed (not for a moved leader, an unknown "
                 "partition or an offset out of range, as in Kafka)"))):
            # As the exporter renders Kafka's meters: one series per topic, and the
            # broker's total without a topic label.
            family = Metric(name, doc, "counter")
            for topic, counts in snapshot.topics:
                family.add_sample(name + "_total", {"topic": topic}, counts[column])
            family.add_sample(name + "_total", {}, snapshot.totals[column])
            yield family
        yield CounterMetricFamily(names.REPLICATION_BYTES_OUT,
                                  "bytes of record batches sent to follower replicas",
                                  value=snapshot.replication_bytes_out)

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
        for request in self.snapshot.requests:
            for version, count in request.by_version:
                requests.add_metric([request.name, str(version)], count)
            for code, count in request.errors:
                errors.add_metric([request.name, _error_name(code)], count)
            if request.by_version:
                _add_histogram(total_time, request.name, request.total_time)
                _add_histogram(queue_time, request.name, request.queue_time)
        yield from (requests, errors, total_time, queue_time)

    def _event_loop(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot.idle_ratio is not None:
            yield GaugeMetricFamily(
                names.NETWORK_PROCESSOR_IDLE,
                "share of the last 10 s the event loop waited for sockets (0 to 1)",
                snapshot.idle_ratio)
        if snapshot.idle_seconds is not None:
            yield CounterMetricFamily(names.LOOP_IDLE_SECONDS,
                                      "time the event loop spent waiting for sockets",
                                      snapshot.idle_seconds)
        yield GaugeMetricFamily(names.LOOP_LAG_SECONDS,
                                "how late the event loop ran its latest timer",
                                snapshot.loop_lag_s)

    # ---------------------------------------------------------------- state
    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(names.LOG_SIZE, "bytes of the partition's log", labels=labels)
        start = GaugeMetricFamily(names.LOG_START_OFFSET, "first offset of the partition's log",
                                  labels=labels)
        end = GaugeMetricFamily(names.LOG_END_OFFSET, "offset the next record appended gets",
                                labels=labels)
        segments = GaugeMetricFamily(names.LOG_SEGMENTS, "segments of the partition's log",
                                     labels=labels)
        for p in self.snapshot.partitions:
            key = [p.topic, str(p.index)]
            size.add_metric(key, p.size)
            start.add_metric(key, p.log_start_offset)
            end.add_metric(key, p.log_end_offset)
            segments.add_metric(key, p.segments)
        yield from (size, start, end, segments)

    def _replicas(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        per_partition = GaugeMetricFamily(
            names.PARTITION_UNDER_REPLICATED,
            "1 if this broker leads the partition and a replica is out of its ISR",
            labels=["topic", "partition"])
        led = [p for p in snapshot.partitions if p.leader]
        for p in led:
            per_partition.add_metric([p.topic, str(p.index)], int(p.under_replicated))
        yield GaugeMetricFamily(names.UNDER_REPLICATED,
                                "partitions led here with a replica out of the ISR",
                                sum(p.under_replicated for p in led))
        yield GaugeMetricFamily(names.UNDER_MIN_ISR,
                                "partitions led here with an ISR below min.insync.replicas",
                                sum(p.under_min_isr for p in led))
        yield per_partition
        yield GaugeMetricFamily(names.PARTITION_COUNT, "partitions hosted here",
                                len(snapshot.partitions))
        yield GaugeMetricFamily(names.LEADER_COUNT, "partitions led here", len(led))
        yield CounterMetricFamily(names.ISR_SHRINKS, "ISR shrinks of partitions led here",
                                  snapshot.isr_shrinks)
        yield CounterMetricFamily(names.ISR_EXPANDS, "ISR expansions of partitions led here",
                                  snapshot.isr_expands)

    def _controller(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        yield GaugeMetricFamily(names.ACTIVE_CONTROLLER,
                                "1 on the cluster's active controller, 0 elsewhere",
                                int(snapshot.active_controller))
        yield GaugeMetricFamily(names.OFFLINE_PARTITIONS,
                                "partitions without a live leader (on the active controller)",
                                snapshot.offline_partitions)
        yield GaugeMetricFamily(names.GLOBAL_TOPICS, "topics in the cluster (controller)",
                                snapshot.global_topics)
        yield GaugeMetricFamily(names.GLOBAL_PARTITIONS, "partitions in the cluster (controller)",
                                snapshot.global_partitions)
        yield _summary_count(names.LEADER_ELECTIONS,
                             "leader elections decided by this broker as controller",
                             snapshot.leader_elections)
        yield CounterMetricFamily(names.UNCLEAN_LEADER_ELECTIONS,
                                  "elections of a leader that was out of sync",
                                  snapshot.unclean_leader_elections)

    def _groups(self) -> Iterator[Metric]:
        groups = self.snapshot.groups
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
        hosted = {(p.topic, p.index): p for p in self.snapshot.partitions}
        for group in groups:
            by_state[group.state] += 1
            members.add_metric([group.group_id], group.members)
            sums: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
            for topic, index, committed in group.offsets:
                key = [group.group_id, topic, str(index)]
                current.add_metric(key, committed)
                sums[topic][0] += committed
                partition = hosted.get((topic, index))
                if partition is None:
                    continue  # hosted elsewhere: its offsets are not known here
                behind = max(0, partition.high_watermark - committed)
                lag.add_metric(key, behind)
                lead.add_metric(key, max(0, committed - partition.log_start_offset))
                sums[topic][1] += behind
            for topic, (offset_sum, behind_sum) in sorted(sums.items()):
                current_sum.add_metric([group.group_id, topic], offset_sum)
                lag_sum.add_metric([group.group_id, topic], behind_sum)
        yield GaugeMetricFamily(names.NUM_GROUPS, "groups coordinated here", len(groups))
        for state, count in by_state.items():
            yield GaugeMetricFamily(names.num_groups_in(state),
                                    f"groups coordinated here in state {state}", count)
        yield GaugeMetricFamily(names.NUM_OFFSETS, "committed offsets held here",
                                sum(len(g.offsets) for g in groups))
        yield from (current, current_sum, lag, lag_sum, lead, members)


def _add_histogram(family: HistogramMetricFamily, request: str, view: HistogramView) -> None:
    running = 0
    buckets = []
    for bound, count in zip(_BOUNDS, view.counts, strict=True):
        running += count
        buckets.append((bound, running))
    family.add_metric([request], buckets, view.total)


def _summary_count(name: str, doc: str, count: float) -> Metric:
    """A Kafka timer of which only the count is kept: a summary with just ``_count``,
    the exporter's series name, valid in both the text format and OpenMetrics (where a
    counter's samples must end in ``_total``)."""
    family = Metric(name, doc, "summary")
    family.add_sample(name + "_count", {}, count)
    return family
