"""Incremental fetch sessions (KIP-227) on the wire, against a broker process.

Raw Fetch v12 requests, as Kafka's Java consumer and followers send them: a full
fetch at epoch 0 opens a session; later fetches name only changed partitions and
are answered with only the partitions that have news; epochs out of step and
unknown sessions are refused with Kafka's errors; epoch -1 closes a session.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator

import pytest
from clients import FETCH_VERSION, WireConnection, versioned_request
from confluent_kafka import Producer
from group_clients import create_topic, produce

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

PARTITIONS = 3


def _partition(index: int, offset: int) -> object:
    return versioned_request(ApiKey.FETCH, FETCH_VERSION, "FetchPartition", partition=index,
                             current_leader_epoch=-1, fetch_offset=offset,
                             last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20)


def fetch(connection: WireConnection, topic: str, named: dict[int, int], session_id: int,
          epoch: int, forgotten: tuple[int, ...] = (), max_wait_s: float = 0.0,
          min_bytes: int = 0) -> object:
    """A consumer's Fetch v12 naming ``named`` (partition: offset) and forgetting
    ``forgotten``."""
    topics = (versioned_request(ApiKey.FETCH, FETCH_VERSION, "FetchTopic", topic=topic,
                                partitions=tuple(_partition(i, o) for i, o in named.items())),
              ) if named else ()
    gone = (versioned_request(ApiKey.FETCH, FETCH_VERSION, "ForgottenTopic", topic=topic,
                              partitions=forgotten),) if forgotten else ()
    body = versioned_request(ApiKey.FETCH, FETCH_VERSION, "FetchRequest", replica_id=-1,
                             max_wait=datetime.timedelta(seconds=max_wait_s),
                             min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0,
                             session_id=session_id, session_epoch=epoch, topics=topics,
                             forgotten_topics_data=gone, rack_id="")
    return connection.request(ApiKey.FETCH, FETCH_VERSION, body)


def answered(answer) -> dict[int, tuple[int, int, bool]]:
    """Partition: (error, high watermark, whether records came)."""
    return {p.partition_index: (p.error_code, p.high_watermark, bool(p.records))
            for t in answer.responses for p in t.partitions}


@pytest.fixture
def session_topic(broker: BrokerProcess, topic_name: str) -> Iterator[str]:
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    yield topic_name


def test_a_session_answers_only_what_changed(broker: BrokerProcess, session_topic: str) -> None:
    topic = session_topic
    produce(broker.bootstrap, topic, 1, PARTITIONS)  # one record, in partition 0
    with WireConnection(broker.bootstrap) as connection:
        full = fetch(connection, topic, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=0)
        assert full.error_code == 0 and full.session_id != 0
        assert answered(full) == {0: (0, 1, True), 1: (0, 0, False), 2: (0, 0, False)}
        session = full.session_id

        # Partition 0 moves past its record: nothing is new anywhere.
        quiet = fetch(connection, topic, {0: 1}, session, epoch=1)
        assert (quiet.error_code, quiet.session_id, answered(quiet)) == (0, session, {})

        # A record in partition 2, which this fetch does not name: the session does.
        produce_to(broker, topic, 2)
        news = fetch(connection, topic, {}, session, epoch=2)
        assert answered(news) == {2: (0, 1, True)}

        # Epochs out of step, and sessions this broker does not know.
        stale = fetch(connection, topic, {}, session, epoch=2)
        assert (stale.error_code, stale.session_id) == (ErrorCode.invalid_fetch_session_epoch, 0)
        unknown = fetch(connection, topic, {}, session + 1, epoch=1)
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found

        # A forgotten partition is not answered about any more.
        assert answered(fetch(connection, topic, {}, session, epoch=3, forgotten=(2,))) == {}
        produce_to(broker, topic, 2)
        assert answered(fetch(connection, topic, {}, session, epoch=4)) == {}

        # Epoch -1 closes it.
        closed = fetch(connection, topic, {0: 1}, session, epoch=-1)
        assert (closed.error_code, closed.session_id) == (0, 0)
        gone = fetch(connection, topic, {}, session, epoch=5)
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_a_parked_session_fetch_wakes_on_a_partition_it_does_not_name(
        broker: BrokerProcess, session_topic: str) -> None:
    """The long poll of an incremental fetch that names nothing still ends as soon as a
    partition of its session gets a record, not at max_wait."""
    topic = session_topic
    with WireConnection(broker.bootstrap) as connection:
        full = fetch(connection, topic, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=0)
        later = threading.Timer(0.3, produce_to, (broker, topic, 1))
        later.start()
        started = time.monotonic()
        woken = fetch(connection, topic, {}, full.session_id, epoch=1, max_wait_s=10,
                      min_bytes=1)
        waited = time.monotonic() - started
        later.join()
        assert answered(woken) == {1: (0, 1, True)}
        assert waited < 5, waited


def produce_to(broker: BrokerProcess, topic: str, partition: int) -> None:
    """One record into ``partition``."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=b"x", partition=partition)
    assert producer.flush(15) == 0
