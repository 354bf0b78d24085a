"""The exactly-once sink's durable decisions: which transactions make up a micro-batch.

Once every task of micro-batch N left its records in an open transaction, the driver
writes the decision ``(N, [transactions])`` here before it commits any of them.  From
then on the batch belongs to the commit: a replay of N (after the driver or the commit
failed) must neither write again nor abort these transactions, only commit them, and a
task or an ``abort`` reads this log to know it.  Before the decision, a replay aborts
them (a task's InitProducerId fences its predecessor) and writes anew.

The log is a compacted topic of one partition per query (``gregor-spark-sink-<query
id>``, created with the first decision), and only its last record matters: reading it
is one ListOffsets and one Fetch, whatever the query's age.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9 import request as produce_request

from gregor.client.connection import BrokerUnavailable, security_options
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.spark.partition_leader import FetchSettings, PartitionLeader
from gregor.spark.transactional_producer import (
    ACKS_ALL,
    PRODUCE_TIMEOUT,
    PRODUCE_VERSION,
    Transaction,
    TransactionFailed,
    topic_exists,
)

LOG_TOPIC_PREFIX = "gregor-spark-sink-"
LATEST = -1
_KEY = b"decision"
_CREATE_TIMEOUT_S = 30


@dataclass(frozen=True)
class BatchDecision:
    """Micro-batch ``batch_id`` is made of exactly these transactions, to be committed."""

    batch_id: int
    transactions: tuple[Transaction, ...]

    def encode(self) -> bytes:
        return json.dumps({"batch": self.batch_id, "transactions": [
            [t.transactional_id, t.producer_id, t.producer_epoch] for t in self.transactions
        ]}).encode()

    @classmethod
    def decode(cls, value: bytes) -> BatchDecision:
        parsed = json.loads(value)
        return cls(int(parsed["batch"]), tuple(
            Transaction(str(tid), int(pid), int(epoch))
            for tid, pid, epoch in parsed["transactions"]))


def log_topic(query_id: str) -> str:
    return LOG_TOPIC_PREFIX + query_id


def last_decision(settings: FetchSettings, topic: str) -> BatchDecision | None:
    """The latest decision, or None if none was ever written.  Failing to read raises:
    taking "unknown" for "none" would let a replay abort a decided batch."""
    if not topic_exists(settings, topic):
        return None
    leader = PartitionLeader(topic, 0, settings)
    try:
        end = leader.list_offset(LATEST)
        if end == 0:
            return None
        leader.send_fetch(end - 1)
        data = leader.receive_fetch()
        if data.error_code != ErrorCode.none:
            raise BrokerUnavailable(f"{topic}: Fetch answered {ErrorCode(data.error_code).name}")
        records = [r for batch in iter_batches(data.records or b"")
                   for r in decode_records(batch)[1]]
    finally:
        leader.close()
    if not records or records[-1].value is None:
        raise BrokerUnavailable(f"{topic}: no record at offset {end - 1}")
    return BatchDecision.decode(records[-1].value)


def write_decision(settings: FetchSettings, config: dict[str, str], topic: str,
                   decision: BatchDecision) -> None:
    """Append the decision, acknowledged by every in-sync replica, creating the topic
    (compacted: only the last decision is ever read) for a query's first one."""
    if not topic_exists(settings, topic):
        _create(config, topic)
    batch = encode_batch([Record(0, _now_ms(), _KEY, decision.encode())])
    body = build(produce_request.ProduceRequest, transactional_id=None, acks=ACKS_ALL,
                 timeout=PRODUCE_TIMEOUT,
                 topic_data=(build(produce_request.TopicProduceData, name=topic,
                                   partition_data=(build(produce_request.PartitionProduceData,
                                                         index=0, records=batch),)),))
    leader = PartitionLeader(topic, 0, settings)
    try:
        answer = leader.connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, body)
    finally:
        leader.close()
    error = ErrorCode(answer.responses[0].partition_responses[0].error_code)
    if error != ErrorCode.none:
        raise TransactionFailed(f"writing micro-batch {decision.batch_id}'s decision to "
                                f"{topic}: {error.name}")


def _create(config: dict[str, str], topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": config["bootstrap.servers"],
                         **security_options(config)})
    future = admin.create_topics([NewTopic(topic, num_partitions=1,
                                           config={"cleanup.policy": "compact"})])[topic]
    try:
        future.result(_CREATE_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def _now_ms() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
