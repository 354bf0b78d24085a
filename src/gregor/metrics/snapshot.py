"""What a scrape reports, copied from the broker on its event loop in one go.

The copy is one consistent moment of the broker (the loop does nothing else while it
is taken), made of plain immutable values that :mod:`.collector` then writes out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.metrics.broker_metrics import BrokerMetrics
from gregor.metrics.loop_monitor import LoopMonitor

if TYPE_CHECKING:
    from gregor.broker.broker import Broker


@dataclass(frozen=True, slots=True)
class HistogramView:
    counts: tuple[int, ...]
    total: float


@dataclass(frozen=True, slots=True)
class RequestView:
    name: str
    by_version: tuple[tuple[int, int], ...]
    errors: tuple[tuple[int, int], ...]
    total_time: HistogramView
    queue_time: HistogramView


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    index: int
    size: int
    log_start_offset: int
    log_end_offset: int
    segments: int
    high_watermark: int
    leader: bool
    under_replicated: bool
    under_min_isr: bool
    labels: tuple[str, str]  # topic, partition: its series' labels, made once per scrape


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    members: int
    offsets: tuple[tuple[str, int, int], ...]  # topic, partition, committed offset


@dataclass(frozen=True, slots=True)
class Snapshot:
    # (topic, its TopicCounters.values()); totals include deleted topics' counts
    topics: tuple[tuple[str, tuple[int, ...]], ...]
    totals: tuple[int, ...]
    replication_bytes_out: int
    requests: tuple[RequestView, ...]
    idle_ratio: float | None
    idle_seconds: float | None
    loop_lag_s: float
    partitions: tuple[PartitionView, ...]
    isr_shrinks: int
    isr_expands: int
    active_controller: bool
    offline_partitions: int
    global_topics: int
    global_partitions: int
    leader_elections: int
    unclean_leader_elections: int
    groups: tuple[GroupView, ...]


def take(broker: Broker, metrics: BrokerMetrics, loop: LoopMonitor) -> Snapshot:
    """Copy everything a scrape reports; call on the broker's event loop."""
    image = broker.image
    for topic in [t for t in metrics.topics if t not in image.topics]:
        metrics.retire(topic)
    topics = tuple((topic, c.values()) for topic, c in sorted(metrics.topics.items()))
    totals = tuple(map(sum, zip(metrics.retired.values(), *(v for _, v in topics),
                                strict=True)))
    requests = tuple(
        RequestView(name, tuple(sorted(c.by_version.items())), tuple(sorted(c.errors.items())),
                    HistogramView(tuple(c.total_time.counts), c.total_time.total),
                    HistogramView(tuple(c.queue_time.counts), c.queue_time.total))
        for name, c in sorted(metrics.as_scraped().items()) if c.by_version or c.errors)
    replica_manager = broker.replica_manager
    partitions = []
    for (topic, index), partition in sorted(replica_manager.partitions.items()):
        log = partition.log
        leader = partition.is_leader
        partitions.append(PartitionView(
            topic, index, log.size, log.log_start_offset, log.log_end_offset,
            len(log.segments), partition.high_watermark, leader,
            leader and len(partition.isr) < len(partition.replicas),
            partition.is_under_min_isr, (topic, str(index))))
    cluster = broker.cluster
    # Alone, a broker is its cluster's controller.
    active = cluster is None or cluster.controller.is_active
    offline = 0
    if active:
        live = set(image.brokers)
        offline = sum(1 for topic in image.topics.values() for state in topic.partitions
                      if state.partition_epoch >= 0 and state.leader not in live)
    groups = tuple(
        GroupView(group_id, group.state.value, len(group.members),
                  tuple(sorted((t, p, o.offset) for (t, p), o in group.offsets.items())))
        for group_id, group in sorted(broker.group_coordinator.groups.items()))
    idle_ratio, idle_seconds = loop.idle()
    return Snapshot(
        topics=topics, totals=totals, replication_bytes_out=metrics.replication_bytes_out,
        requests=requests, idle_ratio=idle_ratio, idle_seconds=idle_seconds,
        loop_lag_s=loop.lag_s, partitions=tuple(partitions),
        isr_shrinks=replica_manager.isr_shrinks, isr_expands=replica_manager.isr_expands,
        active_controller=active, offline_partitions=offline,
        global_topics=len(image.topics) if active else 0,
        global_partitions=sum(len(t.partitions) for t in image.topics.values()) if active else 0,
        leader_elections=0 if cluster is None else cluster.controller.leader_elections,
        unclean_leader_elections=(0 if cluster is None
                                  else cluster.controller.unclean_leader_elections),
        groups=groups)
