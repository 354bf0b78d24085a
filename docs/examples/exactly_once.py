"""Exactly-once consume-transform-produce with confluent-kafka.

Reads SOURCE in consumer group GROUP, writes each record's value upper-cased to
SINK, and commits the consumed offsets in the same transaction as the results:
either both count or neither does. Killed at any moment (even ``kill -9``) and
started again with the same transactional id, it resumes from the last committed
transaction; whatever the killed run had left open is aborted when the new one
calls ``init_transactions``, so a read_committed reader of SINK sees every result
exactly once.

    python exactly_once.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def rewind(consumer: Consumer) -> None:
    """Go back to the last committed offsets: an aborted transaction's input is redone."""
    for tp in consumer.committed(consumer.assignment(), timeout=30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions()
    consumer.subscribe([source])
    while True:
        batch = [m for m in consumer.consume(500, timeout=1.0) if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        try:
            for message in batch:
                producer.produce(sink, key=message.key(), value=message.value().upper())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata())
            producer.commit_transaction()
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise  # fatal (fenced by a newer instance): stop
            producer.abort_transaction()
            rewind(consumer)


if __name__ == "__main__":
    main(*sys.argv[1:6])
