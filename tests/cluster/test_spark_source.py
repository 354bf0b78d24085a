"""The Spark source's executor-side reader across a leader change: it fetches straight
from the partition's leader, so when that broker dies mid-range it must find the new
leader through the metadata and go on from where it was, losing and repeating nothing.
No Spark session: ``read_range`` is what a task runs."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from harness import Cluster

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

from gregor.spark.partition_leader import FetchSettings  # noqa: E402
from gregor.spark.partition_range import PartitionRange, ReadSettings  # noqa: E402
from gregor.spark.partition_reader import read_range  # noqa: E402

RECORDS = 3000


def test_a_range_is_read_exactly_across_the_death_of_its_leader(cluster: Cluster) -> None:
    cluster.create_topic("t")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 5})
    for i in range(RECORDS):
        # 4 KiB values: a RecordBatch of the reader holds about a thousand records, so the
        # first is handed out long before the range is read.
        producer.produce("t", b"%06d" % i + b"." * 4090, b"%d" % i)
    assert producer.flush(30) == 0
    fetch = FetchSettings.from_config({"bootstrap.servers": cluster.bootstrap,
                                       "max.partition.fetch.bytes": "65536"})
    batches = read_range(PartitionRange("t", 0, 0, RECORDS, ReadSettings(fetch, True, True,
                                                                         60_000)))
    first = next(batches)
    assert 0 < first.num_rows < RECORDS
    leader = cluster.leader("t")
    cluster.brokers[leader].kill()
    rows = first.to_pylist() + [row for batch in batches for row in batch.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(RECORDS))
    assert [r["key"] for r in rows] == [b"%d" % i for i in range(RECORDS)]
    assert all(r["value"][:6] == b"%06d" % r["offset"] for r in rows)
    assert cluster.leader("t") != leader
