"""A transaction's completion is retried until it is written, as Kafka's
TransactionMarkerChannelManager re-enqueues markers and completions.

The broker runs in the test's own event loop (so that a failure can be put at the
coordinator's markers or at its state log), a real confluent-kafka producer commits,
and the first attempts after Prepare{Commit,Abort} fail with an error nobody
expects (an OSError, as a failing disk raises). The transaction must still end: its
records become visible to read_committed readers, the producer's next transaction
goes through, and so does a new producer with the same transactional id. The
retries stop when the broker stops coordinating the id, and when it shuts down.

Also here, as it needs the coordinator in hand: ListTransactions while a partition of
``__transaction_state`` is still being loaded.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from clients import WireConnection, versioned_request
from confluent_kafka import Producer
from group_clients import TIMEOUT, create_topic
from in_process_broker import bootstrap_of, in_process_broker
from test_transactions_confluent import READ_COMMITTED, read_to_end, transactional_producer

from gregor.broker.broker import Broker
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.transactions.metadata import TransactionMetadata, TransactionState

# How long the test waits for an event that comes within a second when all is well.
_EVENT_TIMEOUT_S = 15.0


class FailFirst:
    """Wraps a coroutine function: its first ``failures`` calls that ``applies`` to raise
    OSError; ``written`` is set once such a call went through."""

    def __init__(self, real: Callable[..., Awaitable[Any]], failures: int,
                 applies: Callable[..., bool] = lambda *args: True) -> None:
        self.real = real
        self.failures = failures
        self.applies = applies
        self.failed = 0
        self.failed_enough = asyncio.Event()
        self.written = asyncio.Event()

    async def __call__(self, *args: Any) -> Any:
        if self.applies(*args):
            if self.failed < self.failures:
                self.failed += 1
                if self.failed == min(self.failures, 2):
                    self.failed_enough.set()
                raise OSError(28, "No space left on device")
            result = await self.real(*args)
            self.written.set()
            return result
        return await self.real(*args)


def _completion(meta: TransactionMetadata, *_: Any) -> bool:
    return meta.state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


async def _event(event: asyncio.Event, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), _EVENT_TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def _in_thread(call: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    return asyncio.to_thread(call, *args)


async def _commit_with_markers_failing(broker: Broker, topic: str,
                                       transactional_id: str) -> None:
    """A transaction of one record committed while its markers can never be written:
    returns once they failed twice, the coordinator retrying them."""
    def commit(bootstrap: str) -> None:
        create_topic(bootstrap, topic, 1)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        producer.produce(topic, value=b"x", partition=0)
        producer.commit_transaction(TIMEOUT)

    coordinator = broker.transaction_coordinator
    failing = FailFirst(coordinator.markers.write, 1_000_000)
    coordinator.markers.write = failing  # type: ignore[method-assign]
    await _in_thread(commit, bootstrap_of(broker))
    await _event(failing.failed_enough, "the markers to fail twice")


@pytest.mark.parametrize("fault", ["markers", "completion"])
@pytest.mark.parametrize("commit", [True, False])
def test_a_failed_completion_is_retried_until_written(tmp_path: Path, topic_name: str,
                                                      fault: str, commit: bool) -> None:
    transactional_id = f"retried-{uuid.uuid4().hex[:8]}"

    def fail(broker: Broker) -> FailFirst:
        coordinator = broker.transaction_coordinator
        if fault == "markers":
            failing = FailFirst(coordinator.markers.write, 3)
            coordinator.markers.write = failing  # type: ignore[method-assign]
        else:
            failing = FailFirst(coordinator.state_log.write, 3, _completion)
            coordinator.state_log.write = failing  # type: ignore[method-assign]
        return failing

    def first_transaction(bootstrap: str) -> Producer:
        create_topic(bootstrap, topic_name, 2)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic_name, value=b"first-%d" % i, partition=i % 2)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            assert producer.flush(TIMEOUT) == 0
            producer.abort_transaction(TIMEOUT)
        return producer

    def next_transactions(bootstrap: str, producer: Producer) -> None:
        # The same producer's next transaction, then a new producer with the id.
        producer.begin_transaction()
        producer.produce(topic_name, value=b"second", partition=0)
        producer.commit_transaction(10.0)
        successor = transactional_producer(bootstrap, transactional_id)
        successor.begin_transaction()
        successor.produce(topic_name, value=b"third", partition=1)
        successor.commit_transaction(10.0)

    async def scenario() -> list[bytes]:
        async with in_process_broker(tmp_path / "data") as broker:
            failing = fail(broker)
            bootstrap = bootstrap_of(broker)
            producer = await _in_thread(first_transaction, bootstrap)
            await _event(failing.written, f"the {fault} written after {failing.failures} "
                         "failures")
            assert failing.failed == failing.failures
            await _in_thread(next_transactions, bootstrap, producer)
            return sorted(await _in_thread(read_to_end, bootstrap, topic_name, 2,
                                           READ_COMMITTED))

    first = [b"first-%d" % i for i in range(4)] if commit else []
    assert asyncio.run(scenario()) == sorted([*first, b"second", b"third"])


def test_retries_stop_when_the_id_is_coordinated_elsewhere(tmp_path: Path,
                                                           topic_name: str) -> None:
    """The coordinator loses the id's ``__transaction_state`` partition while the
    markers keep failing: it stops sending them (the new coordinator finishes the
    transaction from the log) and lets go of the id."""
    transactional_id = f"moved-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data") as broker:
            coordinator = broker.transaction_coordinator
            await _commit_with_markers_failing(broker, topic_name, transactional_id)
            index = coordinator.state_log.partition_for(transactional_id)
            epoch = coordinator.epochs[index]
            coordinator.leadership_changed(index, False, epoch)
            try:
                await asyncio.wait_for(asyncio.gather(*coordinator._tasks), _EVENT_TIMEOUT_S)
            except TimeoutError:
                raise AssertionError("the completion went on after the id moved") from None
            lock = coordinator._lock(transactional_id)
            assert not lock.locked()

    asyncio.run(scenario())


def test_a_broker_stops_while_a_completion_is_retried(tmp_path: Path, topic_name: str) -> None:
    transactional_id = f"stopping-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data") as broker:
            await _commit_with_markers_failing(broker, topic_name, transactional_id)

    # In a thread of its own: a completion deaf to its cancellation would keep the
    # broker's stop, and asyncio.run's own cleanup after it, from ever returning.
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(_EVENT_TIMEOUT_S * 2)
    assert outcome, "the broker did not stop while a completion was being retried"
    if outcome[0] is not None:
        raise outcome[0]


def test_transactions_are_not_listed_while_loading(tmp_path: Path) -> None:
    """As Kafka's listTransactionStates: COORDINATOR_LOAD_IN_PROGRESS while any partition
    is loading (the admin client asks again), not a list with that partition's ids
    missing."""
    def list_transactions(bootstrap: str) -> tuple[int, tuple[str, ...]]:
        with WireConnection(bootstrap) as connection:
            answer = connection.request(ApiKey.LIST_TRANSACTIONS, 1, versioned_request(
                ApiKey.LIST_TRANSACTIONS, 1, "ListTransactionsRequest", state_filters=(),
                producer_id_filters=(), duration_filter=-1))
            return answer.error_code, tuple(t.transactional_id
                                            for t in answer.transaction_states)

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data") as broker:
            bootstrap = bootstrap_of(broker)
            await _in_thread(transactional_producer, bootstrap, "loaded")
            assert await _in_thread(list_transactions, bootstrap) == (ErrorCode.none,
                                                                      ("loaded",))
            coordinator = broker.transaction_coordinator
            coordinator.loading.add(coordinator.state_log.partition_for("other"))
            assert await _in_thread(list_transactions, bootstrap) == (
                ErrorCode.coordinator_load_in_progress, ())

    asyncio.run(scenario())
