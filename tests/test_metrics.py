"""Prometheus metrics of a broker process, scraped over HTTP and checked against what the
clients did: records and bytes produced, fetches sent, offsets ListOffsets answers,
group lag computed from committed offsets the AdminClient reads, errors the broker
answered. The Grafana dashboard may only query what a broker exports."""

from __future__ import annotations

import datetime
import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from clients import (
    FETCH_VERSION,
    PRODUCE_VERSION,
    TIMEOUT,
    WireConnection,
    api_versions,
    confluent_consume,
    fetch_request,
    make_batch,
    produce_request,
    versioned_request,
)
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    OffsetSpec,
)
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from raw_frames import RawConnection
from scrape import Scrape, scrape

from gregor.broker.process import BrokerProcess
from gregor.config import BrokerConfig, ConfigError
from gregor.metrics.broker_metrics import (
    FOLD_EVERY,
    TIME_BUCKETS_MS,
    BrokerMetrics,
    RequestCounters,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import read_header
from gregor.protocol.record_codec import iter_batches

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "monitoring" / "grafana" / "gregor-dashboard.json"
SCRAPE_CONFIG = REPO / "monitoring" / "prometheus.yml"
IDLE_TOTAL = "gregor_eventloop_idle_seconds_total"


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module's own, with metrics on a port it picks: counters are
    only this module's traffic."""
    data = tmp_path_factory.mktemp("metered") / "data"
    process = BrokerProcess(data, overrides={
        "metrics.listener": "http://127.0.0.1:0/metrics",
        "group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(metered: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": metered.bootstrap})


def _scrape(broker: BrokerProcess) -> Scrape:
    assert broker.metrics_url is not None
    return scrape(broker.metrics_url)


def _create(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 97})  # many batches of odd sizes
    for i in range(count):
        producer.produce(topic, value=b"v" * (i % 300), key=b"%d" % i, partition=i % partitions)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0


def _offsets(admin: AdminClient, topic: str, partitions: int, spec: OffsetSpec) -> list[int]:
    wanted = {TopicPartition(topic, p): spec for p in range(partitions)}
    answers = admin.list_offsets(wanted)
    return [answers[tp].result(TIMEOUT).offset for tp in wanted]


def _wait_for(check: Callable[[], Scrape | None], what: str) -> Scrape:
    """Scrape until ``check(scrape)`` holds: what a dashboard would see next."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        result = check()
        if result is not None:
            return result
        assert time.monotonic() < deadline, f"no scrape showed {what} within {TIMEOUT}s"
        time.sleep(0.1)


def test_messages_and_bytes_in_per_topic_are_what_producers_sent(
        metered: BrokerProcess, admin: AdminClient) -> None:
    big, small = f"m-{uuid.uuid4().hex[:8]}", f"m-{uuid.uuid4().hex[:8]}"
    _create(admin, big, 3)
    _create(admin, small, 1)
    _produce(metered.bootstrap, big, 2000, 3)
    _produce(metered.bootstrap, small, 300, 1)
    metrics = _scrape(metered)
    assert metrics.get("kafka_server_brokertopicmetrics_messagesin_total", topic=big) == 2000
    assert metrics.get("kafka_server_brokertopicmetrics_messagesin_total", topic=small) == 300
    # Bytes in are the batches as the producers framed them: what the segment files
    # now hold, byte for byte (offsets patched in place), and what Size reports.
    for topic, partitions in ((big, 3), (small, 1)):
        on_disk = sum(f.stat().st_size for p in range(partitions)
                      for f in (metered.data_dir / f"{topic}-{p}").glob("*.log"))
        assert metrics.get("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) \
            == on_disk
        assert sum(metrics.series("kafka_log_log_size", topic=topic).values()) == on_disk
    # The broker-wide series (no topic label) is the sum over topics.
    for name in ("kafka_server_brokertopicmetrics_messagesin_total",
                 "kafka_server_brokertopicmetrics_bytesin_total"):
        per_topic = [v for labels, v in metrics.series(name).items() if labels]
        assert metrics.value(name) == sum(per_topic)
    # Every Produce the producers sent is counted, timed and answered NONE.
    produces = sum(metrics.series("kafka_network_requestmetrics_requests_total",
                                  request="Produce").values())
    assert produces >= 2300 / 97
    assert metrics.get("kafka_network_requestmetrics_totaltimems_count",
                       request="Produce") == produces
    assert metrics.get("kafka_network_requestmetrics_requestqueuetimems_count",
                       request="Produce") == produces


def test_a_deleted_topic_leaves_its_counts_in_the_broker_totals(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 1)
    _produce(metered.bootstrap, topic_name, 40, 1)
    before = _scrape(metered)
    assert before.get("kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 40
    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT)
    after = _wait_for(lambda: m if (m := _scrape(metered)).value(
        "kafka_log_log_size", topic=topic_name, partition=0) is None else None,
        "the deleted topic's log gone")
    # Its series go, as Kafka removes a deleted topic's metrics...
    assert after.value("kafka_server_brokertopicmetrics_messagesin_total",
                       topic=topic_name) is None
    # ...and the broker's totals, counters, never go down.
    for name in ("kafka_server_brokertopicmetrics_messagesin_total",
                 "kafka_server_brokertopicmetrics_bytesin_total"):
        assert after.get(name) == before.get(name)


def test_fetches_and_bytes_out_are_what_the_consumer_received(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 1)
    _produce(metered.bootstrap, topic_name, 500, 1)
    before = _scrape(metered)
    received = fetches = 0
    offset = 0
    with WireConnection(metered.bootstrap) as connection:
        while offset < 500:
            answer = connection.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
                topic_name, 0, offset, max_wait_ms=0, max_bytes=4096))
            fetches += 1
            partition = answer.responses[0].partitions[0]
            received += len(partition.records or b"")
            offset = _next_offset(partition.records)
    after = _scrape(metered)

    def grew(name: str, **labels: object) -> float:
        return after.get(name, **labels) - before.get(name, **labels)

    assert grew("kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) == received
    for request in ("Fetch", "FetchConsumer"):
        assert grew("kafka_network_requestmetrics_requests_total", request=request,
                    version=FETCH_VERSION) == fetches
        assert grew("kafka_network_requestmetrics_totaltimems_count", request=request) == fetches
    assert grew("kafka_network_requestmetrics_errors_total", request="Fetch",
                error="NONE") == fetches
    assert grew("kafka_server_brokertopicmetrics_totalfetchrequests_total",
                topic=topic_name) == fetches
    assert grew("kafka_server_brokertopicmetrics_failedfetchrequests_total",
                topic=topic_name) == 0
    assert grew("kafka_network_requestmetrics_requests_total", request="FetchFollower",
                version=FETCH_VERSION) == 0


def test_fetches_of_two_topics_and_of_an_unknown_partition_are_counted_per_partition(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    """A fetch of two topics, then a fetch of a topic's partition and of one it does not
    have: each topic's bytes out are its own record sets', each partition asked for
    counts as a fetch request of its topic and its error as an answer of Fetch (an
    unknown partition is the client's mistake, not a failed fetch, as in Kafka)."""
    other = f"{topic_name}-b"
    _create(admin, topic_name, 1)
    _create(admin, other, 1)
    _produce(metered.bootstrap, topic_name, 50, 1)
    _produce(metered.bootstrap, other, 30, 1)

    def fetch(connection: WireConnection, *topics: tuple[str, tuple[int, ...]]
              ) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's error and bytes of records, fetched from offset 0."""
        answer = connection.request(ApiKey.FETCH, FETCH_VERSION, versioned_request(
            ApiKey.FETCH, FETCH_VERSION, "FetchRequest", cluster_id=None, replica_id=-1,
            max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
            rack_id="", topics=tuple(versioned_request(
                ApiKey.FETCH, FETCH_VERSION, "FetchTopic", topic=topic, partitions=tuple(
                    versioned_request(ApiKey.FETCH, FETCH_VERSION, "FetchPartition",
                                      partition=index, current_leader_epoch=-1,
                                      fetch_offset=0, last_fetched_epoch=-1,
                                      log_start_offset=-1, partition_max_bytes=1 << 20)
                    for index in indexes)) for topic, indexes in topics)))
        return {(t.topic, p.partition_index): (p.error_code, len(p.records or b""))
                for t in answer.responses for p in t.partitions}

    before = _scrape(metered)
    with WireConnection(metered.bootstrap) as connection:
        both = fetch(connection, (topic_name, (0,)), (other, (0,)))
        one_unknown = fetch(connection, (topic_name, (0, 3)))
    after = _scrape(metered)
    assert both[topic_name, 0][0] == both[other, 0][0] == ErrorCode.none
    assert one_unknown[topic_name, 0] == both[topic_name, 0]
    assert one_unknown[topic_name, 3] == (ErrorCode.unknown_topic_or_partition, 0)

    def grew(name: str, **labels: object) -> float:
        return after.get(name, **labels) - before.get(name, **labels)

    assert grew("kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) \
        == 2 * both[topic_name, 0][1] > 0
    assert grew("kafka_server_brokertopicmetrics_bytesout_total", topic=other) \
        == both[other, 0][1] > 0
    assert grew("kafka_server_brokertopicmetrics_totalfetchrequests_total",
                topic=topic_name) == 3
    assert grew("kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=other) == 1
    assert grew("kafka_network_requestmetrics_errors_total", request="Fetch",
                error="NONE") == 3
    assert grew("kafka_network_requestmetrics_errors_total", request="Fetch",
                error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert grew("kafka_server_brokertopicmetrics_failedfetchrequests_total",
                topic=topic_name) == 0
    assert grew("kafka_network_requestmetrics_requests_total", request="Fetch",
                version=FETCH_VERSION) == 2


def _next_offset(records: bytes | None) -> int:
    assert records, "a fetch below the log end returned nothing"
    return [read_header(batch) for batch in iter_batches(records)][-1].next_offset


def test_request_times_count_from_arrival_including_the_wait_behind_others(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    """Five long-polling fetches sent at once on one connection: each waits its
    max.wait (nothing new arrives), and each waits behind the ones before it."""
    _create(admin, topic_name, 1)
    wait_ms, count = 200, 5
    before = _scrape(metered)
    with RawConnection(metered.bootstrap) as connection:
        connection.send_raw(b"".join(
            connection.frame(ApiKey.FETCH, FETCH_VERSION,
                             fetch_request(topic_name, 0, 0, max_wait_ms=wait_ms))
            for _ in range(count)))
        for _ in range(count):
            connection.read_frame()
    after = _scrape(metered)

    def grew(name: str) -> float:
        return after.get(name, request="Fetch") - before.get(name, request="Fetch")

    assert grew("kafka_network_requestmetrics_totaltimems_count") == count
    # The k-th (from 0) queued k long polls and then waited its own.
    assert grew("kafka_network_requestmetrics_requestqueuetimems_sum") \
        >= 0.9 * wait_ms * sum(range(count))
    assert grew("kafka_network_requestmetrics_totaltimems_sum") \
        >= 0.9 * wait_ms * sum(range(1, count + 1))
    # Each answer came after its wait: in the buckets above it, not below.
    buckets = after.series("kafka_network_requestmetrics_totaltimems_bucket", request="Fetch")
    earlier = before.series("kafka_network_requestmetrics_totaltimems_bucket", request="Fetch")
    below = frozenset({("request", "Fetch"), ("le", "100.0")})
    assert buckets[below] == earlier.get(below, 0)
    # Only the first waited behind none: the others' queue times are above 100 ms.
    queued = after.series("kafka_network_requestmetrics_requestqueuetimems_bucket",
                          request="Fetch")
    queued_before = before.series("kafka_network_requestmetrics_requestqueuetimems_bucket",
                                  request="Fetch")
    every = frozenset({("request", "Fetch"), ("le", "+Inf")})
    assert queued[below] - queued_before.get(below, 0) <= 1
    assert queued[every] - queued_before.get(every, 0) == count


def test_an_api_versions_version_not_served_is_counted_and_the_retry_answered(
        metered: BrokerProcess) -> None:
    """ApiVersions at a version the broker does not serve is answered (error 35) before
    anything is decoded; with metrics on, the request is still counted, at the version
    the frame names, and the client's retry on the same connection is answered."""
    before = _scrape(metered)
    with RawConnection(metered.bootstrap) as connection:
        frame = bytearray(connection.frame(ApiKey.API_VERSIONS, 3, versioned_request(
            ApiKey.API_VERSIONS, 3, "ApiVersionsRequest", client_software_name="gregor-tests",
            client_software_version="1")))
        frame[6:8] = (99).to_bytes(2, "big")  # the header's api_version
        connection.send_raw(bytes(frame))
        assert connection.read_frame()[4:6] == ErrorCode.unsupported_version.to_bytes(2, "big")
        assert api_versions(connection)  # the retry, answered
    after = _scrape(metered)

    def grew(version: int) -> float:
        return (after.get("kafka_network_requestmetrics_requests_total",
                          request="ApiVersions", version=str(version))
                - before.get("kafka_network_requestmetrics_requests_total",
                             request="ApiVersions", version=str(version)))

    assert (grew(99), grew(3)) == (1, 1)


def test_a_failed_produce_is_counted_by_its_error(metered: BrokerProcess, admin: AdminClient,
                                                  topic_name: str) -> None:
    _create(admin, topic_name, 1)
    before = _scrape(metered)
    with WireConnection(metered.bootstrap) as connection:
        answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
            topic_name, 5, make_batch([b"nowhere"])))
        assert answer.responses[0].partition_responses[0].error_code \
            == ErrorCode.unknown_topic_or_partition
        answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
            topic_name, 0, make_batch([b"here", b"too"])))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
            topic_name, 0, None))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
    after = _scrape(metered)

    def grew(name: str, **labels: object) -> float:
        return after.get(name, **labels) - before.get(name, **labels)

    assert grew("kafka_network_requestmetrics_errors_total", request="Produce",
                error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert grew("kafka_network_requestmetrics_errors_total", request="Produce",
                error="NONE") == 1
    assert grew("kafka_network_requestmetrics_errors_total", request="Produce",
                error="INVALID_RECORD") == 1
    assert grew("kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 2
    # Each partition asked for is a produce request of the topic; as in Kafka, one
    # refused as unknown is the client's mistake, an invalid record set a failure.
    assert grew("kafka_server_brokertopicmetrics_totalproducerequests_total",
                topic=topic_name) == 3
    assert grew("kafka_server_brokertopicmetrics_failedproducerequests_total",
                topic=topic_name) == 1


def test_log_offsets_are_what_list_offsets_answers(metered: BrokerProcess, admin: AdminClient,
                                                   topic_name: str) -> None:
    _create(admin, topic_name, 3)
    _produce(metered.bootstrap, topic_name, 900, 3)
    # Deleting records moves partition 1's log start.
    admin.delete_records([TopicPartition(topic_name, 1, 120)])[
        TopicPartition(topic_name, 1, 120)].result(TIMEOUT)
    metrics = _scrape(metered)
    latest = _offsets(admin, topic_name, 3, OffsetSpec.latest())
    earliest = _offsets(admin, topic_name, 3, OffsetSpec.earliest())
    assert earliest[1] == 120
    for partition in range(3):
        assert metrics.value("kafka_log_log_logendoffset", topic=topic_name,
                             partition=partition) == latest[partition] == 300
        assert metrics.value("kafka_log_log_logstartoffset", topic=topic_name,
                             partition=partition) == earliest[partition]
        assert metrics.value("kafka_log_log_numlogsegments", topic=topic_name,
                             partition=partition) == 1
        assert metrics.value("kafka_cluster_partition_underreplicated", topic=topic_name,
                             partition=partition) == 0
    assert metrics.get("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert metrics.get("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert metrics.get("kafka_controller_kafkacontroller_offlinepartitionscount") == 0


def test_group_offsets_lag_and_lead_match_the_committed_offsets(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    _create(admin, topic_name, 3)
    _produce(metered.bootstrap, topic_name, 600, 3)
    admin.delete_records([TopicPartition(topic_name, 2, 50)])[
        TopicPartition(topic_name, 2, 50)].result(TIMEOUT)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        confluent_consume(consumer, 550)
        # Positions of a consumer part way through each partition.
        consumer.commit(offsets=[TopicPartition(topic_name, p, o)
                                 for p, o in ((0, 100), (1, 151), (2, 199))],
                        asynchronous=False)
        stable = _scrape(metered)
        assert stable.get("kafka_coordinator_group_groupmetadatamanager_numgroupsstable") >= 1
        assert stable.get("kafka_consumergroup_members", consumergroup=group) == 1
    finally:
        consumer.close()
    _produce(metered.bootstrap, topic_name, 30, 3)  # the log moves on without the group

    # What the group committed, read back by the AdminClient, and the log's ends.
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = {tp.partition: tp.offset
                 for tp in answer[group].result(TIMEOUT).topic_partitions}
    latest = _offsets(admin, topic_name, 3, OffsetSpec.latest())
    earliest = _offsets(admin, topic_name, 3, OffsetSpec.earliest())
    assert committed == {0: 100, 1: 151, 2: 199}

    metrics = _scrape(metered)
    for partition, offset in committed.items():
        labels = {"consumergroup": group, "topic": topic_name, "partition": partition}
        assert metrics.value("kafka_consumergroup_current_offset", **labels) == offset
        assert metrics.value("kafka_consumergroup_lag", **labels) == latest[partition] - offset
        assert metrics.value("kafka_consumergroup_lead", **labels) \
            == offset - earliest[partition]
    assert metrics.value("kafka_consumergroup_lag_sum", consumergroup=group, topic=topic_name) \
        == sum(latest) - sum(committed.values())
    assert metrics.get("kafka_consumergroup_members", consumergroup=group) == 0
    assert metrics.get("kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1
    by_state = sum(metrics.get(f"kafka_coordinator_group_groupmetadatamanager_numgroups{s}")
                   for s in ("preparingrebalance", "completingrebalance", "stable", "empty",
                             "dead"))
    assert metrics.get("kafka_coordinator_group_groupmetadatamanager_numgroups") == by_state


def test_the_event_loop_reports_its_idle_share_and_lag(metered: BrokerProcess) -> None:
    metrics = _wait_for(lambda: m if (m := _scrape(metered)).value(
        "kafka_network_socketserver_networkprocessoravgidlepercent") is not None else None,
        "the idle share")
    idle = metrics.get("kafka_network_socketserver_networkprocessoravgidlepercent")
    assert 0 < idle <= 1  # a broker answering scrapes is mostly idle, and never more
    assert metrics.get(IDLE_TOTAL) > 0
    assert 0 <= metrics.get("gregor_eventloop_lag_seconds") < 5


def test_the_idle_seconds_count_only_what_the_loop_sleeps(metered: BrokerProcess,
                                                          admin: AdminClient) -> None:
    """Nearly all of a quiet second is idle; little of one spent answering a flood of
    one-record produce requests is (the loop's run and run-queue time, from the kernel)."""
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    _create(admin, topic, 1)

    def idle_share(during: Callable[[], None]) -> float:
        before, start = _scrape(metered).get(IDLE_TOTAL), time.monotonic()
        during()
        return (_scrape(metered).get(IDLE_TOTAL) - before) / (time.monotonic() - start)

    def flood() -> None:
        producer = Producer({"bootstrap.servers": metered.bootstrap, "linger.ms": 0,
                             "batch.num.messages": 1, "queue.buffering.max.messages": 1000})
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                producer.produce(topic, b"x")
            except BufferError:
                producer.poll(0.001)
            producer.poll(0)
        assert producer.flush(TIMEOUT) == 0

    assert idle_share(lambda: time.sleep(1.5)) > 0.8
    assert idle_share(flood) < 0.5


def test_the_endpoint_answers_its_path_in_both_formats(metered: BrokerProcess) -> None:
    assert metered.metrics_url is not None
    other = metered.metrics_url.removesuffix("/metrics") + "/other"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(other, timeout=10)
    assert refused.value.code == 404
    with urllib.request.urlopen(metered.metrics_url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    # Prometheus asks for OpenMetrics first: the same samples, valid by its stricter rules.
    asked = urllib.request.Request(metered.metrics_url, headers={
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
    with urllib.request.urlopen(asked, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
        families = list(openmetrics_families(answer.read().decode()))
    strict = {s.name for family in families for s in family.samples}
    assert strict == Scrape(text).names
    assert "kafka_controller_controllerstats_leaderelectionrateandtimems_count" in strict
    assert "kafka_server_replicamanager_leadercount" in strict


@pytest.mark.parametrize(("listener", "expected"), [
    ("", None),
    ("http://127.0.0.1:9644/metrics", ("127.0.0.1", 9644, "/metrics")),
    ("http://127.0.0.1:9644", ("127.0.0.1", 9644, "/metrics")),
    ("127.0.0.1:9644", ("127.0.0.1", 9644, "/metrics")),
    ("http://0.0.0.0:9700/prometheus", ("0.0.0.0", 9700, "/prometheus")),
])
def test_metrics_listener_forms(listener: str, expected: tuple | None) -> None:
    config = BrokerConfig.from_mapping({"metrics.listener": listener})
    assert config.metrics_listener == expected


@pytest.mark.parametrize("listener", ["https://127.0.0.1:9644/metrics", "127.0.0.1:http"])
def test_a_metrics_listener_that_cannot_be_served_is_refused(listener: str) -> None:
    with pytest.raises(ConfigError, match="metrics.listener"):
        _ = BrokerConfig.from_mapping({"metrics.listener": listener}).metrics_listener


def test_no_metrics_listener_when_metrics_are_off(broker: BrokerProcess) -> None:
    assert broker.metrics_url is None
    assert broker.pid is not None
    listening = [c.laddr.port for c in psutil.Process(broker.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening == [broker.port]


def test_the_dashboard_queries_only_what_brokers_export(
        metered: BrokerProcess, admin: AdminClient, topic_name: str) -> None:
    # Traffic enough for every kind of series: a topic, a group with offsets.
    _create(admin, topic_name, 1)
    _produce(metered.bootstrap, topic_name, 20, 1)
    consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": f"d-{topic_name}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        confluent_consume(consumer, 20)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    exported = _scrape(metered).names
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for expr in _expressions(dashboard)
               for name in re.findall(r"\b((?:kafka|gregor)_[a-z_]+)\b", expr)}
    assert len(queried) >= 15
    assert queried - exported == set()
    # The scrape configuration points at the brokers the scripts start.
    config = SCRAPE_CONFIG.read_text()
    for port in (9644, 9645, 9646):
        assert f"127.0.0.1:{port}" in config


def _expressions(node: object) -> Iterator[str]:
    """Every PromQL expression in a dashboard: panel targets' and templating's."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query") and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def test_a_scrape_counts_every_request_answered_folded_or_not() -> None:
    """Requests are folded into the histograms FOLD_EVERY at a time; a scrape in between
    still sees each one, once, in the bucket of its time."""
    metrics = BrokerMetrics()
    # Arrived at 10 s, started 0.2 ms later, answered at 3 ms: buckets 0.25 and 5 ms.
    times = (10.0, 10.0002, 10.003)

    def produce(count: int) -> RequestCounters:
        for _ in range(count):
            metrics.request_completed(int(ApiKey.PRODUCE), 9, False, *times)
        return metrics.as_scraped()["Produce"]

    assert produce(3).by_version == {9: 3}
    produce_counters = produce(FOLD_EVERY * 2 + 1)
    total = 3 + FOLD_EVERY * 2 + 1
    assert produce_counters.by_version == {9: total}
    queue, whole = produce_counters.queue_time, produce_counters.total_time
    assert queue.counts[TIME_BUCKETS_MS.index(0.25)] == sum(queue.counts) == total
    assert whole.counts[TIME_BUCKETS_MS.index(5.0)] == sum(whole.counts) == total
    assert queue.total == pytest.approx(total * 0.2)
    assert whole.total == pytest.approx(total * 3.0)
    metrics.request_completed(int(ApiKey.FETCH), 12, True, *times)
    scraped = metrics.as_scraped()
    assert scraped["FetchFollower"].by_version == scraped["Fetch"].by_version == {12: 1}
    assert not scraped["FetchConsumer"].by_version
