"""Replication over real sockets: a gregor broker leads a partition, a follower's
ReplicaManager in the same event loop copies it with Kafka's Fetch over its broker
channel, and a real client produces with acks=all.

The leading broker runs alone (no ZooKeeper); the partition states the metadata
listener would deliver are applied to both replica managers directly, through the
same ``apply_partition_state`` the listener calls.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from clients import PRODUCE_VERSION, make_batch, produce_request
from confluent_kafka import Producer
from in_process_broker import in_process_broker
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.list_offsets.v7 import request as offsets_request
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from replication_helpers import log_bytes, state
from storage_helpers import batch

from gregor.broker.broker import Broker
from gregor.cluster.broker_channel import BrokerChannel
from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.partition import FollowerState, Partition
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import decode_response, encode_request
from gregor.protocol.errors import ErrorCode
from gregor.storage.log_manager import LogManager

TIMEOUT_S = 60.0
RECORDS = 200


@asynccontextmanager
async def leading_broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, TopicMetadata]]:
    """Broker 1 serving topic t, whose partition 0 it leads at epoch 1 with follower 2."""
    async with in_process_broker(tmp_path / "leader", {"broker.id": "1"}) as broker:
        topic = await broker.controller.create_topic("t", 1, 1)
        broker.replica_manager.apply_partition_state(topic, 0, state(1, 1, (1, 2), (1, 2), 1))
        yield broker, topic


def follower_manager(tmp_path: Path, leader: Broker, backoff_ms: int = 50) -> ReplicaManager:
    config = BrokerConfig.from_mapping({"broker.id": "2", "log.dirs": str(tmp_path / "follower"),
                                        "replica.fetch.backoff.ms": str(backoff_ms)})
    return ReplicaManager(config, LogManager(tmp_path / "follower"),
                          broker_address=lambda b: leader.bound_address if b == 1 else None)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not condition():
            await asyncio.sleep(0.01)


def produce_acks_all(address: tuple[str, int]) -> list[tuple[int, str | None]]:
    """Produce RECORDS values with an idempotent acks=all producer; (offset, error) each."""
    host, port = address
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    delivered: list[tuple[int, str | None]] = []
    for i in range(RECORDS):
        producer.produce("t", value=b"v%d" % i, partition=0, on_delivery=lambda err, msg: (
            delivered.append((msg.offset(), None if err is None else str(err)))))
    assert producer.flush(TIMEOUT_S) == 0
    return delivered


def test_a_follower_copies_acks_all_writes_byte_for_byte(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            follower = follower_manager(tmp_path, broker)
            follower.apply_partition_state(topic, 0, state(1, 1, (1, 2), (1, 2), 1))
            leader = broker.replica_manager.get("t", 0)
            copy = follower.get("t", 0)
            assert leader is not None and copy is not None and not copy.is_leader
            try:
                delivered = await asyncio.to_thread(produce_acks_all, broker.bound_address)
                assert sorted(delivered) == [(i, None) for i in range(RECORDS)]
                # Each acknowledgement came once the follower had the records.
                assert leader.high_watermark == leader.log_end_offset == RECORDS
                assert leader.followers[2].log_end_offset == RECORDS
                await until(lambda: copy.high_watermark == RECORDS)
                assert log_bytes(copy) == log_bytes(leader)
                assert copy.log.leader_epoch_cache.epochs == [1]
                producers = copy.log.producer_state.producers
                assert [p.last_seq for p in producers.values()] == [RECORDS - 1]
                # It fetched in one incremental session (KIP-227) all along.
                (fetcher,) = follower.fetchers.values()
                (session,) = broker.replica_manager.fetch_sessions.sessions.values()
                assert fetcher.session.session_id == session.id
                assert session.replica_id == 2 and list(session.partitions) == [("t", 0)]
            finally:
                await follower.stop()

    asyncio.run(scenario())


def test_a_follower_ahead_of_its_leader_asks_again_soon(tmp_path: Path) -> None:
    """The follower learned of leader epoch 2 before the leader did (each learns it from
    ZooKeeper on its own): the leader refuses its fetch (UNKNOWN_LEADER_EPOCH) until it
    learns it too. The follower asks again at once, not after replica.fetch.backoff.ms,
    during which the leader's high watermark could not move."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            leader = broker.replica_manager.get("t", 0)
            assert leader is not None
            leader.append_as_leader(batch(3), 1)
            follower = follower_manager(tmp_path, broker, backoff_ms=600_000)
            follower.apply_partition_state(topic, 0, state(1, 2, (1, 2), (1, 2), 2))
            copy = follower.get("t", 0)
            assert copy is not None
            try:
                (fetcher,) = follower.fetchers.values()
                await until(lambda: ("t", 0) in fetcher.delayed)  # refused once
                broker.replica_manager.apply_partition_state(topic, 0,
                                                             state(1, 2, (1, 2), (1, 2), 2))
                await until(lambda: copy.log_end_offset == 3)
            finally:
                await follower.stop()

    asyncio.run(scenario())


def test_a_refused_follower_of_a_quiet_partition_is_heard_once_the_leader_knows(
        tmp_path: Path) -> None:
    """As above with nothing to copy: the follower's first fetch is refused, and the
    partition stays quiet afterwards. Its next fetches in the session must still tell
    the leader where it is (as Kafka's leader counts every partition of a session at
    each fetch), else the leader never learns that it is caught up and drops it from
    the ISR for good (seen: a failover in a cluster never regained min.insync.replicas)."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            leader = broker.replica_manager.get("t", 0)
            assert leader is not None
            follower = follower_manager(tmp_path, broker, backoff_ms=600_000)
            follower.apply_partition_state(topic, 0, state(1, 2, (1, 2), (1, 2), 2))
            try:
                (fetcher,) = follower.fetchers.values()
                await until(lambda: ("t", 0) in fetcher.delayed)  # refused once
                broker.replica_manager.apply_partition_state(topic, 0,
                                                             state(1, 2, (1, 2), (1, 2), 2))
                await until(lambda: leader.followers[2].log_end_offset == 0)
            finally:
                await follower.stop()

    asyncio.run(scenario())


def test_a_follower_the_leader_lost_track_of_is_heard_again_on_a_quiet_partition(
        tmp_path: Path) -> None:
    """The leader's record of a follower outside the ISR can be missing while the
    follower's session holds the partition (it named it before this broker led it, or
    its fetches came slower than the session counts as fresh), and a quiet partition is
    never named again. The periodic ISR check must have the session read it again, so
    the leader learns it is caught up (seen at 10,000 partitions: after a controller
    failover a broker stayed out of 241 ISRs for minutes, each until new data came)."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            broker.replica_manager.apply_partition_state(topic, 0, state(1, 2, (1,), (1, 2), 2))
            leader = broker.replica_manager.get("t", 0)
            assert leader is not None
            leader.append_as_leader(batch(3), 1)
            follower = follower_manager(tmp_path, broker)
            follower.apply_partition_state(topic, 0, state(1, 2, (1,), (1, 2), 2))
            try:
                await until(lambda: leader.followers[2].log_end_offset == 3)
                leader.followers[2] = FollowerState()  # what a new leadership knows
                await asyncio.sleep(1.0)  # the follower's session goes on, t-0 quiet
                assert leader.followers[2].log_end_offset == -1
                broker.replica_manager.shrink_isrs()
                async with asyncio.timeout(10):
                    await until(lambda: leader.followers[2].log_end_offset == 3)
            finally:
                await follower.stop()

    asyncio.run(scenario())


def test_a_follower_truncates_what_it_alone_wrote_then_copies(tmp_path: Path) -> None:
    """Broker 2 led epoch 1 alone and wrote records broker 1 never had; broker 1 now
    leads epoch 2 with records of its own. Over the wire, the leader answers broker 2's
    first fetch with a diverging epoch; broker 2 cuts and ends with the leader's log."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            broker.replica_manager.apply_partition_state(topic, 0,
                                                         state(1, 2, (1,), (1, 2), 2))
            leader = broker.replica_manager.get("t", 0)
            assert leader is not None
            leader.append_as_leader(batch(5, tag="leader"), 1)
            follower = follower_manager(tmp_path, broker)
            follower.apply_partition_state(topic, 0, state(2, 1, (2,), (1, 2), 1))
            copy = follower.get("t", 0)
            assert copy is not None
            copy.append_as_leader(batch(3, tag="alone"), 1)
            try:
                follower.apply_partition_state(topic, 0, state(1, 2, (1,), (1, 2), 2))
                await until(lambda: copy.log_end_offset == leader.log_end_offset
                            and copy.log.leader_epoch_cache.epochs == [2])
                assert log_bytes(copy) == log_bytes(leader)
                # Its next fetch tells the leader it has the leader's log end.
                await until(lambda: leader.followers[2].log_end_offset == 5)
            finally:
                await follower.stop()

    asyncio.run(scenario())


async def _epoch_query(channel: BrokerChannel, current: int, epoch: int,
                       topic: str = "t") -> tuple[ErrorCode, int, int]:
    answer = await channel.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4,
                                   epoch_request.OffsetForLeaderEpochRequest(
        replica_id=-1, topics=(epoch_request.OffsetForLeaderTopic(topic=topic, partitions=(
            epoch_request.OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                                   leader_epoch=epoch),)),)))
    result = answer.topics[0].partitions[0]
    return result.error_code, result.leader_epoch, result.end_offset


def _latest_offset_request(replica_id: int) -> offsets_request.ListOffsetsRequest:
    return offsets_request.ListOffsetsRequest(
        replica_id=replica_id, isolation_level=0, topics=(offsets_request.ListOffsetsTopic(
            name="t", partitions=(offsets_request.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))


async def _latest_offset(channel: BrokerChannel, replica_id: int) -> tuple[ErrorCode, int]:
    answer = await channel.request(ApiKey.LIST_OFFSETS, 7, _latest_offset_request(replica_id))
    result = answer.topics[0].partitions[0]
    return result.error_code, result.offset


def test_acks_all_produces_in_flight_are_appended_at_once_and_answered_in_order(
        tmp_path: Path) -> None:
    """A producer's acks=all requests in flight on one connection: each is appended as it
    arrives, not after the one before was replicated, and answered once replicated, in
    request order; a request of another kind is handled after them and sees what they
    did (here: a consumer's latest offset, the high watermark they moved)."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, _):
            leader = broker.replica_manager.get("t", 0)
            assert leader is not None
            reader, writer = await asyncio.open_connection(*broker.bound_address)
            try:
                for correlation_id, values in ((1, [b"a", b"b"]), (2, [b"c", b"d"])):
                    writer.write(encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id,
                                                "tests", produce_request("t", 0,
                                                                         make_batch(values))))
                writer.write(encode_request(ApiKey.LIST_OFFSETS, 7, 3, "tests",
                                            _latest_offset_request(-1)))
                # Follower 2 has fetched nothing yet: both requests wait, appended.
                await until(lambda: leader.log_end_offset == 4)
                assert leader.high_watermark == 0
                broker.replica_manager.record_follower_fetch(leader, 2, 4, 0, 4)
                answers = [await _answer(reader, api) for api in (
                    ApiKey.PRODUCE, ApiKey.PRODUCE, ApiKey.LIST_OFFSETS)]
                assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3]
                produced = [answer.responses[0].partition_responses[0]
                            for _, answer in answers[:2]]
                assert [(p.error_code, p.base_offset) for p in produced] == [
                    (ErrorCode.none, 0), (ErrorCode.none, 2)]
                assert answers[2][1].topics[0].partitions[0].offset == 4
            finally:
                writer.close()

    asyncio.run(scenario())


async def _answer(reader: asyncio.StreamReader, api_key: ApiKey) -> tuple[int, object]:
    """The next response on the connection: its correlation id and body."""
    async with asyncio.timeout(TIMEOUT_S):
        size = int.from_bytes(await reader.readexactly(4), "big")
        return decode_response(api_key, PRODUCE_VERSION if api_key == ApiKey.PRODUCE else 7,
                               await reader.readexactly(size))


async def _fetch(channel: BrokerChannel, replica_id: int, current: int, offset: int,
                 last_fetched_epoch: int) -> object:
    answer = await channel.request(ApiKey.FETCH, 12, fetch_request.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(0), min_bytes=0,
        topics=(fetch_request.FetchTopic(topic="t", partitions=(fetch_request.FetchPartition(
            partition=0, current_leader_epoch=current, fetch_offset=offset,
            last_fetched_epoch=last_fetched_epoch, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=()))
    return answer.responses[0].partitions[0]


def test_leader_epoch_answers_over_the_wire(tmp_path: Path) -> None:
    """OffsetForLeaderEpoch and Fetch as librdkafka, the Java client and followers see
    them: end offsets per epoch, and Kafka's errors for stale or unknown epochs."""
    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            leader = broker.replica_manager.get("t", 0)
            assert isinstance(leader, Partition)
            leader.append_as_leader(batch(4), 1)  # epoch 1: offsets 0-3
            broker.replica_manager.apply_partition_state(topic, 0, state(1, 3, (1, 2), (1, 2), 3))
            leader.append_as_leader(batch(2), 1)  # epoch 3: offsets 4-5
            channel = BrokerChannel(1, lambda b: broker.bound_address, TIMEOUT_S)
            try:
                assert await _epoch_query(channel, 3, 3) == (ErrorCode.none, 3, 6)
                assert await _epoch_query(channel, 3, 1) == (ErrorCode.none, 1, 4)
                assert await _epoch_query(channel, 3, 2) == (ErrorCode.none, 1, 4)
                assert await _epoch_query(channel, -1, 0) == (ErrorCode.none, 0, 0)
                assert (await _epoch_query(channel, 2, 1))[0] == ErrorCode.fenced_leader_epoch
                assert (await _epoch_query(channel, 4, 1))[0] == ErrorCode.unknown_leader_epoch
                assert (await _epoch_query(channel, 3, 1, "nope"))[0] == (
                    ErrorCode.unknown_topic_or_partition)

                # A follower that fetched to 5 in epoch 2 (which this leader never had).
                answer = await _fetch(channel, 2, 3, 5, 2)
                assert answer.error_code == ErrorCode.none and not answer.records
                assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (
                    1, 4)
                assert leader.followers[2].log_end_offset == -1  # not counted
                answer = await _fetch(channel, 2, 3, 4, 1)
                assert answer.diverging_epoch.epoch == -1 and answer.records
                assert leader.followers[2].log_end_offset == 4
                # A fetcher that knows an older epoch is fenced; one that knows a newer
                # one (this leader is stale) is told the epoch is unknown here.
                assert (await _fetch(channel, 2, 2, 4, 1)).error_code == (
                    ErrorCode.fenced_leader_epoch)
                assert (await _fetch(channel, -1, 4, 0, -1)).error_code == (
                    ErrorCode.unknown_leader_epoch)
                answer = await _fetch(channel, 7, 3, 0, -1)  # not a replica
                assert answer.error_code == ErrorCode.unknown_leader_epoch
                answer = await _fetch(channel, -1, 3, 0, -1)  # a consumer: below the HW
                assert answer.error_code == ErrorCode.none
                assert answer.high_watermark == 4 and answer.records

                # Deposed: broker 2 leads epoch 4.
                broker.replica_manager.apply_partition_state(topic, 0,
                                                             state(2, 4, (2,), (1, 2), 4))
                assert (await _epoch_query(channel, 4, 3))[0] == ErrorCode.not_leader_or_follower
                answer = await _fetch(channel, -1, 4, 0, -1)
                assert answer.error_code == ErrorCode.not_leader_or_follower
                # Nor are its offsets a client's to read: its high watermark is stale.
                assert await _latest_offset(channel, -1) == (ErrorCode.not_leader_or_follower,
                                                             -1)
                assert await _latest_offset(channel, -2) == (ErrorCode.none, 4)  # a tool
            finally:
                channel.close()

    asyncio.run(scenario())
