"""DescribeProducers in a cluster, through ``gregor transactions describe-producers``:
followers answer from the producer state they rebuilt from the batches they
replicated, as the leader does; a broker holding no replica answers
NOT_LEADER_OR_FOLLOWER (Kafka's answers, where kafka-transactions.sh --broker-id asks)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from harness import Cluster

pytestmark = pytest.mark.timeout(180)


def describe(cluster: Cluster, topic: str, broker_id: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor.cli.main", "transactions",
                           "describe-producers", "--topic", topic, "--partition", "0",
                           "--broker-id", str(broker_id), "-b", cluster.bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_every_replica_describes_the_producers_it_replicated(cluster: Cluster) -> None:
    cluster.create_topic("described", replication=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": "described-tx", "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("described", b"open-%d" % i, partition=0)
        assert producer.flush(30) == 0  # a batch each: last sequence 2

    replicas = set(cluster.metadata().topics["described"].partitions[0].replicas)
    (outsider,) = set(cluster.brokers) - replicas
    expected = None
    for broker_id in sorted(replicas):
        deadline = time.monotonic() + 30
        while True:  # a follower has the batches once it fetched them
            result = describe(cluster, "described", broker_id)
            assert result.returncode == 0, result.stderr
            _, *rows = [line.split() for line in result.stdout.splitlines()]
            if rows and rows[0][3] == "2":
                break
            assert time.monotonic() < deadline, f"broker {broker_id}: {rows}"
            time.sleep(0.2)
        (row,) = rows
        # Epoch 0, no marker yet, sequence 2, the open transaction from offset 0.
        assert [row[1], row[2], row[3], row[5]] == ["0", "-1", "2", "0"], broker_id
        assert expected in (None, row), broker_id
        expected = row
    refused = describe(cluster, "described", outsider)
    assert refused.returncode == 1 and "NOT_LEADER_OR_FOLLOWER" in refused.stderr
    producer.abort_transaction(30)
