"""A scrape's :class:`~gregor.metrics.snapshot.Snapshot` written as Prometheus families.

Group lag is each committed offset's distance to the partition's high watermark (what
a consumer can read, and what ListOffsets answers for the latest offset), for the
partitions this broker hosts; lead is its distance from the log start.
"""

from __future__ import annotations

from collections import defaultdict

from gregor.metrics import names
from gregor.metrics.broker_metrics import TIME_BUCKETS_MS
from gregor.metrics.exposition import Exposition, Labels
from gregor.metrics.snapshot import Snapshot
from gregor.protocol.errors import ErrorCode

_BOUNDS = (*map(repr, TIME_BUCKETS_MS), "+Inf")
_TOPIC: Labels = ("topic",)
_PARTITION: Labels = ("topic", "partition")
_GROUP_PARTITION: Labels = ("consumergroup", "topic", "partition")
_GROUP_TOPIC: Labels = ("consumergroup", "topic")
_GROUP: Labels = ("consumergroup",)
_REQUEST: Labels = ("request",)
_REQUEST_VERSION: Labels = ("request", "version")
_REQUEST_ERROR: Labels = ("request", "error")
_NONE: Labels = ()
# In the order of TopicCounters' fields.
_TOPIC_FAMILIES = (
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
     "partition or an offset out of range, as in Kafka)"))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


def write(snapshot: Snapshot, out: Exposition) -> None:
    for part in (_topic_counters, _requests, _event_loop, _logs, _replicas, _controller,
                 _groups):
        part(snapshot, out)


def _one(out: Exposition, name: str, doc: str, kind: str, value: float) -> None:
    """A family of one series without labels."""
    out.family(name, doc, kind)
    out.sample(name + "_total" if kind == "counter" else name, _NONE, _NONE, value)


# ----------------------------------------------------------------- counters
def _topic_counters(snapshot: Snapshot, out: Exposition) -> None:
    for column, (name, doc) in enumerate(_TOPIC_FAMILIES):
        # As the exporter renders Kafka's meters: one series per topic, and the
        # broker's total without a topic label.
        out.family(name, doc, "counter")
        series = name + "_total"
        for topic, counts in snapshot.topics:
            out.sample(series, _TOPIC, (topic,), counts[column])
        out.sample(series, _NONE, _NONE, snapshot.totals[column])
    _one(out, names.REPLICATION_BYTES_OUT, "bytes of record batches sent to follower replicas",
         "counter", snapshot.replication_bytes_out)


def _requests(snapshot: Snapshot, out: Exposition) -> None:
    requests = snapshot.requests
    out.family(names.REQUESTS, "requests answered, by API and version", "counter")
    series = names.REQUESTS + "_total"
    for request in requests:
        for version, count in request.by_version:
            out.sample(series, _REQUEST_VERSION, (request.name, str(version)), count)
    out.family(names.ERRORS, "answers by API and error code (per partition for Produce and "
               "Fetch, NONE included)", "counter")
    series = names.ERRORS + "_total"
    for request in requests:
        for code, count in request.errors:
            out.sample(series, _REQUEST_ERROR, (request.name, _error_name(code)), count)
    for name, doc, field in (
            (names.TOTAL_TIME_MS, "time from a request's arrival to its answer sent, in ms",
             "total_time"),
            (names.REQUEST_QUEUE_TIME_MS,
             "time a received request waited for the ones before it on its connection, in ms",
             "queue_time")):
        out.family(name, doc, "histogram")
        for request in requests:
            if request.by_version:
                view = getattr(request, field)
                out.histogram(name, _REQUEST, (request.name,), _BOUNDS, view.counts,
                              view.total)


def _event_loop(snapshot: Snapshot, out: Exposition) -> None:
    if snapshot.idle_ratio is not None:
        _one(out, names.NETWORK_PROCESSOR_IDLE,
             "share of the last 10 s the event loop waited for sockets (0 to 1)", "gauge",
             snapshot.idle_ratio)
    if snapshot.idle_seconds is not None:
        _one(out, names.LOOP_IDLE_SECONDS, "time the event loop spent waiting for sockets",
             "counter", snapshot.idle_seconds)
    _one(out, names.LOOP_LAG_SECONDS, "how late the event loop ran its latest timer", "gauge",
         snapshot.loop_lag_s)


# -------------------------------------------------------------------- state
def _logs(snapshot: Snapshot, out: Exposition) -> None:
    partitions = snapshot.partitions
    for name, doc, field in (
            (names.LOG_SIZE, "bytes of the partition's log", "size"),
            (names.LOG_START_OFFSET, "first offset of the partition's log", "log_start_offset"),
            (names.LOG_END_OFFSET, "offset the next record appended gets", "log_end_offset"),
            (names.LOG_SEGMENTS, "segments of the partition's log", "segments")):
        out.family(name, doc, "gauge")
        for p in partitions:
            out.sample(name, _PARTITION, p.labels, getattr(p, field))


def _replicas(snapshot: Snapshot, out: Exposition) -> None:
    led = [p for p in snapshot.partitions if p.leader]
    _one(out, names.UNDER_REPLICATED, "partitions led here with a replica out of the ISR",
         "gauge", sum(p.under_replicated for p in led))
    _one(out, names.UNDER_MIN_ISR, "partitions led here with an ISR below min.insync.replicas",
         "gauge", sum(p.under_min_isr for p in led))
    out.family(names.PARTITION_UNDER_REPLICATED,
               "1 if this broker leads the partition and a replica is out of its ISR", "gauge")
    for p in led:
        out.sample(names.PARTITION_UNDER_REPLICATED, _PARTITION, p.labels,
                   int(p.under_replicated))
    _one(out, names.PARTITION_COUNT, "partitions hosted here", "gauge",
         len(snapshot.partitions))
    _one(out, names.LEADER_COUNT, "partitions led here", "gauge", len(led))
    _one(out, names.ISR_SHRINKS, "ISR shrinks of partitions led here", "counter",
         snapshot.isr_shrinks)
    _one(out, names.ISR_EXPANDS, "ISR expansions of partitions led here", "counter",
         snapshot.isr_expands)


def _controller(snapshot: Snapshot, out: Exposition) -> None:
    _one(out, names.ACTIVE_CONTROLLER, "1 on the cluster's active controller, 0 elsewhere",
         "gauge", int(snapshot.active_controller))
    _one(out, names.OFFLINE_PARTITIONS,
         "partitions without a live leader (on the active controller)", "gauge",
         snapshot.offline_partitions)
    _one(out, names.GLOBAL_TOPICS, "topics in the cluster (controller)", "gauge",
         snapshot.global_topics)
    _one(out, names.GLOBAL_PARTITIONS, "partitions in the cluster (controller)", "gauge",
         snapshot.global_partitions)
    # A Kafka timer of which only the count is kept: a summary with just ``_count``,
    # the exporter's series name, valid in both the text format and OpenMetrics (where
    # a counter's samples must end in ``_total``).
    out.family(names.LEADER_ELECTIONS, "leader elections decided by this broker as controller",
               "summary")
    out.sample(names.LEADER_ELECTIONS + "_count", _NONE, _NONE, snapshot.leader_elections)
    _one(out, names.UNCLEAN_LEADER_ELECTIONS, "elections of a leader that was out of sync",
         "counter", snapshot.unclean_leader_elections)


def _groups(snapshot: Snapshot, out: Exposition) -> None:
    groups = snapshot.groups
    by_state: dict[str, int] = dict.fromkeys(names.GROUP_STATES, 0)
    for group in groups:
        by_state[group.state] += 1
    _one(out, names.NUM_GROUPS, "groups coordinated here", "gauge", len(groups))
    for state, count in by_state.items():
        _one(out, names.num_groups_in(state), f"groups coordinated here in state {state}",
             "gauge", count)
    _one(out, names.NUM_OFFSETS, "committed offsets held here", "gauge",
         sum(len(g.offsets) for g in groups))
    hosted = {(p.topic, p.index): p for p in snapshot.partitions}
    # Per group: its offsets (group, topic, partition, committed), its lag and lead
    # where the partition is hosted here, and per topic the sums of both.
    current: list[tuple[Labels, int]] = []
    lag: list[tuple[Labels, int]] = []
    lead: list[tuple[Labels, int]] = []
    current_sum: list[tuple[Labels, int]] = []
    lag_sum: list[tuple[Labels, int]] = []
    for group in groups:
        sums: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
        for topic, index, committed in group.offsets:
            key = (group.group_id, topic, str(index))
            current.append((key, committed))
            sums[topic][0] += committed
            partition = hosted.get((topic, index))
            if partition is None:
                continue  # hosted elsewhere: its offsets are not known here
            behind = max(0, partition.high_watermark - committed)
            lag.append((key, behind))
            lead.append((key, max(0, committed - partition.log_start_offset)))
            sums[topic][1] += behind
        for topic, (offset_sum, behind_sum) in sorted(sums.items()):
            current_sum.append(((group.group_id, topic), offset_sum))
            lag_sum.append(((group.group_id, topic), behind_sum))
    for name, doc, labels, series in (
            (names.GROUP_CURRENT_OFFSET, "committed offset of a group at a partition",
             _GROUP_PARTITION, current),
            (names.GROUP_CURRENT_OFFSET_SUM, "committed offsets of a group at a topic, summed",
             _GROUP_TOPIC, current_sum),
            (names.GROUP_LAG, "high watermark minus the committed offset", _GROUP_PARTITION,
             lag),
            (names.GROUP_LAG_SUM, "lag of a group at a topic, summed", _GROUP_TOPIC, lag_sum),
            (names.GROUP_LEAD, "committed offset minus the log start offset",
             _GROUP_PARTITION, lead)):
        out.family(name, doc, "gauge")
        for label_values, value in series:
            out.sample(name, labels, label_values, value)
    out.family(names.GROUP_MEMBERS, "members of a group", "gauge")
    for group in groups:
        out.sample(names.GROUP_MEMBERS, _GROUP, (group.group_id,), group.members)
