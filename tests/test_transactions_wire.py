"""Every advertised version of the transactional APIs, sent raw: a whole transaction
per version (InitProducerId with a transactional id, AddPartitionsToTxn, a
transactional Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), the answers
checked field by field, then Fetch at read_committed of every version listing the
aborted ones. Also what is refused: transactional batches outside a transaction
or without a transactional id, markers from clients, a fenced epoch by version."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

from clients import (
    WireConnection,
    advertised_versions,
    make_batch,
    produce_request,
    versioned_request,
)
from group_clients import create_topic, wait_until

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.control_record import encode_marker
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, encode_batch

TXN_APIS = (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
            ApiKey.TXN_OFFSET_COMMIT)


def transactional_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)


class Client:
    def __init__(self, connection: WireConnection) -> None:
        self.connection = connection

    def request(self, key: ApiKey, version: int, entity: str, /, **fields: object):
        return self.connection.request(key, version, versioned_request(key, version, entity,
                                                                       **fields))

    def init(self, transactional_id: str, timeout_ms: int = 60000,
             version: int = 4) -> tuple[int, int, int]:
        answer = self.request(ApiKey.INIT_PRODUCER_ID, version, "InitProducerIdRequest",
                              transactional_id=transactional_id,
                              transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                              producer_id=-1, producer_epoch=-1)
        return answer.error_code, answer.producer_id, answer.producer_epoch

    def add_partition(self, version: int, txn: str, pid: int, epoch: int, topic: str,
                      partition: int = 0) -> int:
        topic_entry = versioned_request(ApiKey.ADD_PARTITIONS_TO_TXN, version,
                                        "AddPartitionsToTxnTopic", name=topic,
                                        partitions=(partition,))
        answer = self.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnRequest",
                              v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                              v3_and_below_producer_epoch=epoch,
                              v3_and_below_topics=(topic_entry,))
        (result,) = answer.results_by_topic_v3_and_below
        assert result.name == topic
        ((index, error),) = [(r.partition_index, r.partition_error_code)
                             for r in result.results_by_partition]
        assert index == partition
        return error

    def produce(self, txn: str | None, topic: str, records: bytes) -> int:
        return self.produce_to(txn, topic, 0, records)

    def produce_to(self, txn: str | None, topic: str, partition: int, records: bytes) -> int:
        body = produce_request(topic, partition, records)
        body = body.__class__(transactional_id=txn, acks=body.acks, timeout=body.timeout,
                              topic_data=body.topic_data)
        answer = self.connection.request(ApiKey.PRODUCE, 9, body)
        return answer.responses[0].partition_responses[0].error_code

    def end(self, version: int, txn: str, pid: int, epoch: int, commit: bool) -> int:
        return self.request(ApiKey.END_TXN, version, "EndTxnRequest", transactional_id=txn,
                            producer_id=pid, producer_epoch=epoch, committed=commit).error_code

    def offset_fetch(self, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
        asked = versioned_request(ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic",
                                  name=topic, partition_indexes=(0,))
        answer = self.request(ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequest", group_id=group,
                              topics=(asked,), require_stable=require_stable)
        (partition,) = answer.topics[0].partitions
        return partition.error_code, partition.committed_offset


def test_every_advertised_transaction_version(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    aborted: list[tuple[int, int]] = []
    offset = 0
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        versions = {key: advertised_versions(connection, key) for key in TXN_APIS}
        # AddPartitionsToTxn v4 is the brokers' (test_leaders_verify_with_add_partitions_v4).
        assert versions == {**dict.fromkeys(TXN_APIS, range(0, 4)),
                            ApiKey.ADD_PARTITIONS_TO_TXN: range(0, 5)}
        for version in advertised_versions(connection, ApiKey.INIT_PRODUCER_ID):
            txn = f"init-{version}-{uuid.uuid4().hex[:8]}"
            first = client.init(txn, version=version)
            assert first[0] == ErrorCode.none and first[2] == 0
            # Again: the same producer id, the next epoch.
            assert client.init(txn, version=version) == (ErrorCode.none, first[1], 1)
        for version in range(4):
            txn = f"wire-{version}-{uuid.uuid4().hex[:8]}"
            error, pid, epoch = client.init(txn)
            assert (error, epoch) == (ErrorCode.none, 0) and pid >= 0
            assert client.add_partition(version, txn, pid, epoch, topic_name) == 0
            assert client.produce(txn, topic_name, transactional_batch(
                pid, epoch, 0, [b"v%d-a" % version, b"v%d-b" % version])) == 0
            answer = client.request(ApiKey.ADD_OFFSETS_TO_TXN, version, "AddOffsetsToTxnRequest",
                                    transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                                    group_id=group)
            assert answer.error_code == 0
            committed = versioned_request(ApiKey.TXN_OFFSET_COMMIT, version,
                                          "TxnOffsetCommitRequestPartition", partition_index=0,
                                          committed_offset=offset + 2,
                                          committed_leader_epoch=-1, committed_metadata="m")
            topic = versioned_request(ApiKey.TXN_OFFSET_COMMIT, version,
                                      "TxnOffsetCommitRequestTopic", name=topic_name,
                                      partitions=(committed,))
            answer = client.request(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequest",
                                    transactional_id=txn, group_id=group, producer_id=pid,
                                    producer_epoch=epoch, generation_id=-1, member_id="",
                                    group_instance_id=None, topics=(topic,))
            assert [(p.partition_index, p.error_code)
                    for p in answer.topics[0].partitions] == [(0, 0)]
            before = client.offset_fetch(group, topic_name, require_stable=False)
            assert client.offset_fetch(group, topic_name, require_stable=True) == (
                ErrorCode.unstable_offset_commit, -1)
            commit = version % 2 == 0
            assert client.end(version, txn, pid, epoch, commit) == 0
            # A retry of the same EndTxn succeeds; the other outcome is refused.
            assert client.end(version, txn, pid, epoch, commit) == 0
            assert client.end(version, txn, pid, epoch, not commit) == ErrorCode.invalid_txn_state
            after = client.offset_fetch(group, topic_name, require_stable=True)
            assert after == ((0, offset + 2) if commit else before)
            if not commit:
                aborted.append((pid, offset))
            offset += 3  # two records and the marker

        for version in advertised_versions(connection, ApiKey.FETCH):
            partition = versioned_request(ApiKey.FETCH, version, "FetchPartition", partition=0,
                                          current_leader_epoch=-1, fetch_offset=0,
                                          last_fetched_epoch=-1, log_start_offset=-1,
                                          partition_max_bytes=1 << 20)
            topic = versioned_request(ApiKey.FETCH, version, "FetchTopic", topic=topic_name,
                                      partitions=(partition,))
            answer = client.request(ApiKey.FETCH, version, "FetchRequest", cluster_id=None,
                                    replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
                                    max_bytes=1 << 20, isolation_level=1, session_id=0,
                                    session_epoch=-1, topics=(topic,), forgotten_topics_data=(),
                                    rack_id="")
            (got,) = answer.responses[0].partitions
            assert (got.error_code, got.last_stable_offset) == (0, offset), version
            assert [(a.producer_id, a.first_offset)
                    for a in got.aborted_transactions] == aborted, version


def _verify(client: Client, txn: str, pid: int, epoch: int,
            partitions: dict[str, tuple[int, ...]], verify_only: bool = True
            ) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v4, as a partition leader sends it: one transaction."""
    key = ApiKey.ADD_PARTITIONS_TO_TXN
    topics = tuple(versioned_request(key, 4, "AddPartitionsToTxnTopic", name=name,
                                     partitions=indexes)
                   for name, indexes in partitions.items())
    transaction = versioned_request(key, 4, "AddPartitionsToTxnTransaction",
                                    transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                                    verify_only=verify_only, topics=topics)
    answer = client.request(key, 4, "AddPartitionsToTxnRequest", transactions=(transaction,))
    assert answer.error_code == 0
    (result,) = answer.results_by_transaction
    assert result.transactional_id == txn
    return {(topic.name, p.partition_index): p.partition_error_code
            for topic in result.topic_results for p in topic.results_by_partition}


def test_leaders_verify_with_add_partitions_v4(broker: BrokerProcess, topic_name: str) -> None:
    """What a partition leader on another broker asks before a producer's first
    transactional batch (KIP-890): VerifyOnly answers from the coordinator's memory,
    adding nothing, with Kafka 3.7's codes."""
    create_topic(broker.bootstrap, topic_name, 3)
    txn = f"verify-{uuid.uuid4().hex[:8]}"
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        _, pid, epoch = client.init(txn)
        every = {topic_name: (0, 1)}
        every_tp = [(topic_name, 0), (topic_name, 1)]
        # No transaction yet: nothing is in it.
        assert _verify(client, txn, pid, epoch, every) == dict.fromkeys(
            every_tp, ErrorCode.invalid_txn_state)
        assert client.add_partition(3, txn, pid, epoch, topic_name, 0) == 0
        assert _verify(client, txn, pid, epoch, every) == {
            (topic_name, 0): ErrorCode.none, (topic_name, 1): ErrorCode.invalid_txn_state}
        # Verifying added nothing: partition 1 is still refused a transactional batch.
        batch = transactional_batch(pid, epoch, 0, [b"x"])
        assert client.produce_to(txn, topic_name, 1, batch) == ErrorCode.invalid_txn_state
        assert _verify(client, txn, pid + 1, epoch, every) == dict.fromkeys(
            every_tp, ErrorCode.invalid_producer_id_mapping)
        assert _verify(client, txn, pid, epoch + 1, every) == dict.fromkeys(
            every_tp, ErrorCode.producer_fenced)
        assert _verify(client, "", pid, epoch, every) == dict.fromkeys(
            every_tp, ErrorCode.invalid_request)
        # An unknown partition: the others are not attempted.
        assert _verify(client, txn, pid, epoch, {topic_name: (0, 9)}) == {
            (topic_name, 0): ErrorCode.operation_not_attempted,
            (topic_name, 9): ErrorCode.unknown_topic_or_partition}
        # Without VerifyOnly, v4 adds, as v3 does.
        assert _verify(client, txn, pid, epoch, {topic_name: (2,)}, verify_only=False) == {
            (topic_name, 2): ErrorCode.none}
        assert _verify(client, txn, pid, epoch, {topic_name: (0, 2)}) == {
            (topic_name, 0): ErrorCode.none, (topic_name, 2): ErrorCode.none}
        assert client.end(3, txn, pid, epoch, False) == 0
        wait_until(lambda: _verify(client, txn, pid, epoch, {topic_name: (0,)}) == {
            (topic_name, 0): ErrorCode.invalid_txn_state}, what="the abort completed")


def test_fenced_epochs_are_told_as_each_version_can(broker: BrokerProcess,
                                                     topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    txn = f"fenced-{uuid.uuid4().hex[:8]}"
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        _, pid, old_epoch = client.init(txn)
        assert client.add_partition(0, txn, pid, old_epoch, topic_name) == 0
        assert client.produce(txn, topic_name, transactional_batch(pid, old_epoch, 0, [b"x"])) == 0
        _, same_pid, epoch = client.init(txn)
        assert same_pid == pid and epoch > old_epoch + 0
        for version in range(4):
            expected = (ErrorCode.invalid_producer_epoch if version < 2
                        else ErrorCode.producer_fenced)
            assert client.end(version, txn, pid, old_epoch, True) == expected
            assert client.add_partition(version, txn, pid, old_epoch, topic_name) == expected
        # The fenced producer's batches are refused too.
        assert client.produce(txn, topic_name, transactional_batch(
            pid, old_epoch, 1, [b"y"])) == ErrorCode.invalid_producer_epoch
        assert client.init(txn, timeout_ms=900001) == (
            ErrorCode.invalid_transaction_timeout, -1, -1)


def test_transactional_batches_only_inside_a_transaction(broker: BrokerProcess,
                                                         topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    txn = f"outside-{uuid.uuid4().hex[:8]}"
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        _, pid, epoch = client.init(txn)
        batch = transactional_batch(pid, epoch, 0, [b"x"])
        # Not added to a transaction: its LSO would wait for a marker forever.
        assert client.produce(txn, topic_name, batch) == ErrorCode.invalid_txn_state
        # Without a transactional id, or as a marker from a client: never.
        assert client.produce(None, topic_name, batch) == ErrorCode.invalid_record
        marker = encode_marker(pid, epoch, True, 0, 1_700_000_000_000)
        assert client.produce(txn, topic_name, marker) == ErrorCode.invalid_record
        assert client.produce(None, topic_name, make_batch([b"plain"])) == 0
        # A partition that does not exist is refused, and nothing else is added.
        topic_entry = versioned_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                        "AddPartitionsToTxnTopic", name=topic_name,
                                        partitions=(0, 7))
        answer = client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnRequest",
                                v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                                v3_and_below_producer_epoch=epoch,
                                v3_and_below_topics=(topic_entry,))
        assert sorted((r.partition_index, r.partition_error_code) for r in
                      answer.results_by_topic_v3_and_below[0].results_by_partition) == [
            (0, ErrorCode.operation_not_attempted), (7, ErrorCode.unknown_topic_or_partition)]
        assert client.produce(txn, topic_name, batch) == ErrorCode.invalid_txn_state
        # EndTxn with nothing begun is refused, as in Kafka.
        assert client.end(3, txn, pid, epoch, True) == ErrorCode.invalid_txn_state


def test_transactions_are_described_and_listed(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    open_id, done_id = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("open", "done"))
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        assert advertised_versions(connection, ApiKey.DESCRIBE_TRANSACTIONS) == range(0, 1)
        assert advertised_versions(connection, ApiKey.LIST_TRANSACTIONS) == range(0, 2)
        _, open_pid, open_epoch = client.init(open_id, timeout_ms=45000)
        assert client.add_partition(3, open_id, open_pid, open_epoch, topic_name, 1) == 0
        _, done_pid, done_epoch = client.init(done_id)
        assert client.add_partition(3, done_id, done_pid, done_epoch, topic_name) == 0
        assert client.end(3, done_id, done_pid, done_epoch, False) == 0

        answer = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactionsRequest",
                                transactional_ids=(open_id, done_id, "no-such-id"))
        described, completed, unknown = answer.transaction_states
        assert (described.error_code, described.transactional_id, described.transaction_state,
                described.producer_id, described.producer_epoch) == (
            0, open_id, "Ongoing", open_pid, open_epoch)
        assert described.transaction_timeout == datetime.timedelta(seconds=45)
        assert described.transaction_start_time.year >= 2024
        assert [(t.topic, t.partitions) for t in described.topics] == [(topic_name, (1,))]
        assert (completed.transaction_state, completed.topics) == ("CompleteAbort", ())
        assert unknown.error_code == ErrorCode.transactional_id_not_found

        for version in (0, 1):
            answer = client.request(ApiKey.LIST_TRANSACTIONS, version, "ListTransactionsRequest",
                                    state_filters=("Ongoing", "Bogus"),
                                    producer_id_filters=(), duration_filter=-1)
            assert answer.unknown_state_filters == ("Bogus",)
            listed = {(t.transactional_id, t.producer_id, t.transaction_state)
                      for t in answer.transaction_states}
            assert (open_id, open_pid, "Ongoing") in listed
            assert all(state == "Ongoing" for _, _, state in listed)
        answer = client.request(ApiKey.LIST_TRANSACTIONS, 1, "ListTransactionsRequest",
                                state_filters=(), producer_id_filters=(done_pid,),
                                duration_filter=-1)
        assert [(t.transactional_id, t.transaction_state)
                for t in answer.transaction_states] == [(done_id, "CompleteAbort")]


def test_transactions_are_listed_by_duration_as_kafka_lists_them(broker: BrokerProcess,
                                                                 topic_name: str) -> None:
    """Kafka's TransactionStateManager.listTransactionStates keeps, for a duration d, the
    ids whose transaction started more than d ms ago, whatever their state: a completed
    transaction too, and an id with none begun (its start time is -1)."""
    create_topic(broker.bootstrap, topic_name, 1)
    open_id, done_id, empty_id = (f"{kind}-{uuid.uuid4().hex[:8]}"
                                  for kind in ("open", "done", "empty"))
    with WireConnection(broker.bootstrap) as connection:
        client = Client(connection)
        _, open_pid, open_epoch = client.init(open_id)
        assert client.add_partition(3, open_id, open_pid, open_epoch, topic_name) == 0
        _, done_pid, done_epoch = client.init(done_id)
        assert client.add_partition(3, done_id, done_pid, done_epoch, topic_name) == 0
        assert client.end(3, done_id, done_pid, done_epoch, True) == 0
        client.init(empty_id)

        def listed(duration_ms: int) -> dict[str, str]:
            answer = client.request(ApiKey.LIST_TRANSACTIONS, 1, "ListTransactionsRequest",
                                    state_filters=(), producer_id_filters=(),
                                    duration_filter=duration_ms)
            assert answer.error_code == ErrorCode.none
            return {t.transactional_id: t.transaction_state for t in answer.transaction_states}

        # Begun more than an hour ago: only ids with no transaction begun.
        hour = listed(3_600_000)
        assert hour[empty_id] == "Empty" and set(hour.values()) == {"Empty"}
        wait_until(lambda: {open_id, done_id} <= listed(0).keys(),
                   what="the transactions to be listed as begun more than 0 ms ago")
        everything = listed(0)
        assert (everything[open_id], everything[done_id], everything[empty_id]) == (
            "Ongoing", "CompleteCommit", "Empty")
        assert listed(-1).keys() >= {open_id, done_id, empty_id}
        answer = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactionsRequest",
                                transactional_ids=("",))
        assert answer.transaction_states[0].error_code == ErrorCode.invalid_request


def test_idle_transactional_ids_expire(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={
        "transactional.id.expiration.ms": "500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "100"})
    broker.start()
    try:
        idle, busy = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("idle", "busy"))
        create_topic(broker.bootstrap, "expiry", 1)
        with WireConnection(broker.bootstrap) as connection:
            client = Client(connection)
            _, idle_pid, _ = client.init(idle)
            _, busy_pid, busy_epoch = client.init(busy)
            assert client.add_partition(3, busy, busy_pid, busy_epoch, "expiry") == 0
            later = f"later-{uuid.uuid4().hex[:8]}"
            client.init(later)  # idle since after busy's last change

            def listed() -> set[str]:
                answer = client.request(ApiKey.LIST_TRANSACTIONS, 1, "ListTransactionsRequest",
                                        state_filters=(), producer_id_filters=(),
                                        duration_filter=-1)
                return {t.transactional_id for t in answer.transaction_states}

            wait_until(lambda: not {idle, later} & listed(),
                       what="the idle transactional ids to expire")
            # An open transaction keeps its id, however long it stays idle.
            assert busy in listed()
        broker.stop()
        broker.start()
        with WireConnection(broker.bootstrap) as connection:
            client = Client(connection)
            answer = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                    "DescribeTransactionsRequest", transactional_ids=(idle,))
            assert answer.transaction_states[0].error_code == (
                ErrorCode.transactional_id_not_found)
            error, pid, epoch = client.init(idle)
            assert (error, epoch) == (ErrorCode.none, 0) and pid != idle_pid
    finally:
        broker.kill()
