"""Every client library against a replicated cluster: metadata, acks=all, groups.

librdkafka (kcat and confluent-kafka) is exercised throughout the fault tests; here
kcat's metadata listing, kafka-python and aiokafka produce with acks=all and consume
in a group through a coordinator that is not the broker they bootstrapped from.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from clients import WireConnection, alter_broker_configs, versioned_request
from harness import Cluster
from kafka import KafkaConsumer, KafkaProducer

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    started = Cluster(zookeeper, Path(tmp_path_factory.mktemp("clients"))).start()
    yield started
    started.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/setup.sh")
def test_kcat_lists_every_broker_and_the_replicas(cluster: Cluster) -> None:
    cluster.create_topic("listed", partitions=2)
    listing = subprocess.run(["kcat", "-b", cluster.bootstrap, "-L", "-t", "listed"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert " 3 brokers:" in listing
    for broker_id, broker in cluster.brokers.items():
        assert f"broker {broker_id} at {broker.bootstrap}" in listing
    # "partition 0, leader 2, replicas: 2,3,1, isrs: 2,3,1"
    partitions = re.findall(r"leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)", listing)
    assert len(partitions) == 2
    for leader, replicas, isrs in partitions:
        assert leader == replicas.split(",")[0]
        assert sorted(replicas.split(",")) == sorted(isrs.split(",")) == ["1", "2", "3"]


def test_kafka_python_acks_all_and_a_group(cluster: Cluster) -> None:
    cluster.create_topic("kp", partitions=3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    futures = [producer.send("kp", b"kp-%d" % i) for i in range(300)]
    producer.flush(30)
    acked = [f.get(timeout=30) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in acked}) == 300
    consumer = KafkaConsumer("kp", bootstrap_servers=cluster.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=20000)
    values = set()
    for message in consumer:
        values.add(message.value)
        if len(values) == 300:
            break
    consumer.commit()
    consumer.close()
    assert values == {b"kp-%d" % i for i in range(300)}


def test_aiokafka_acks_all_and_a_group(cluster: Cluster) -> None:
    cluster.create_topic("ak", partitions=3)

    async def scenario() -> set[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                    enable_idempotence=True)
        await producer.start()
        try:
            for i in range(300):
                await producer.send("ak", b"ak-%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("ak", bootstrap_servers=cluster.bootstrap,
                                    group_id="ak-group", auto_offset_reset="earliest")
        await consumer.start()
        values: set[bytes] = set()
        try:
            async with asyncio.timeout(60):
                async for message in consumer:
                    values.add(message.value)
                    if len(values) == 300:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(scenario()) == {b"ak-%d" % i for i in range(300)}


def test_a_deleted_topic_is_gone_when_delete_topics_answers(cluster: Cluster) -> None:
    """DeleteTopics waits, up to the request's timeout, until the broker that answers
    no longer has the topic, as Kafka's does (aiokafka's own admin test lists topics
    right after); with a timeout of 0 it answers REQUEST_TIMED_OUT while the deletion
    goes on, which librdkafka's non-blocking delete takes for success, as from Kafka."""
    for name in ("doomed", "doomed-later"):
        cluster.create_topic(name, partitions=2)

    async def delete(name: str) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([name])
            assert name not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(delete("doomed"))
    controller = cluster.brokers[cluster.metadata().controller_id]
    with WireConnection(controller.bootstrap) as connection:
        answer = connection.request(ApiKey.DELETE_TOPICS, 4, versioned_request(
            ApiKey.DELETE_TOPICS, 4, "DeleteTopicsRequest", topic_names=("doomed-later",),
            timeout=datetime.timedelta(0)))
    assert [r.error_code for r in answer.responses] == [ErrorCode.request_timed_out]
    cluster.wait_for(lambda m: not {"doomed", "doomed-later"} & set(m.topics),
                     "both topics gone")


def test_dynamic_broker_configs_reach_every_broker(cluster: Cluster) -> None:
    """The cluster's default dynamic configs (kept in ZooKeeper, /config/brokers/<default>)
    reach every broker, whichever took them; a broker's own reach that broker only."""
    cluster.create_topic("dyn")

    def alter(name: str, value: str | None) -> None:
        # The default through broker 1, broker 2's own through broker 2, as clients do.
        through = cluster.brokers[int(name or 1)].bootstrap
        assert alter_broker_configs(through, name, {"log.retention.ms": value}) == 0

    def retention(view) -> tuple[str, int]:
        (entry,) = view.results[0].configs
        return entry.value, entry.config_source

    def seen_by(broker_id: int, expected: tuple[str, int]) -> None:
        deadline = time.monotonic() + 10
        with WireConnection(cluster.brokers[broker_id].bootstrap) as connection:
            while (found := retention(connection.request(
                    ApiKey.DESCRIBE_CONFIGS, 4, versioned_request(
                        ApiKey.DESCRIBE_CONFIGS, 4, "DescribeConfigsRequest",
                        resources=(versioned_request(
                            ApiKey.DESCRIBE_CONFIGS, 4, "DescribeConfigsResource",
                            resource_type=2, resource_name="dyn",
                            configuration_keys=("retention.ms",)),),
                        include_synonyms=False, include_documentation=False)))) != expected:
                assert time.monotonic() < deadline, (broker_id, found)
                time.sleep(0.05)

    dynamic_default, dynamic_own = 3, 2  # ConfigSource: DYNAMIC_DEFAULT_BROKER_CONFIG, ...
    try:
        alter("", "3600000")
        for broker_id in cluster.brokers:
            seen_by(broker_id, ("3600000", dynamic_default))
        alter("2", "7200000")
        seen_by(2, ("7200000", dynamic_own))
        for broker_id in (1, 3):
            seen_by(broker_id, ("3600000", dynamic_default))
    finally:
        alter("2", None)
        alter("", None)
    for broker_id in cluster.brokers:
        seen_by(broker_id, ("604800000", 5))  # DEFAULT_CONFIG
