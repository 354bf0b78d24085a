"""``deliveryGuarantee=exactly-once``: a micro-batch (or a batch write) becomes visible to
``read_committed`` readers when the driver commits it (its tasks' transactions within
about one round trip of each other), and a replayed micro-batch is not written twice.

A two-phase commit over Kafka transactions, as Flink's Kafka sink does it.  Phase one, in
each task: produce into a transaction of ``transactional.id`` ``<prefix>-<Spark
partition>`` (stable across attempts and restarts of the query, so that a retried
attempt fences and aborts its predecessor) and return the transaction, still open.
Phase two, in the driver's ``commit``: record the micro-batch's transactions in the
query's commit log (:mod:`gregor.spark.sink_commit_log`), then send EndTxn(commit) for
each.  A micro-batch replayed after the decision was recorded writes nothing and
commits the recorded transactions again (a no-op for those already committed).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from gregor.spark.options import SinkOptions
from gregor.spark.partition_leader import FetchSettings
from gregor.spark.sink_commit_log import BatchDecision, last_decision, log_topic, write_decision
from gregor.spark.transactional_producer import (
    Headers,
    Transaction,
    TransactionalProducer,
    TransactionFailed,
    end_transactions,
    fence,
    known,
)

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Local properties Spark's MicroBatchExecution sets for every task of a micro-batch."""

RecordColumns = tuple[
    str | Sequence[str],
    Sequence[bytes | None] | None,
    Sequence[bytes | None],
    Sequence[int | None] | None,
    Sequence[Headers | None] | None,
]
"""A batch's ``(topics, keys, values, partitions, headers)`` as
:meth:`TransactionalProducer.add` takes them."""


@dataclass(frozen=True)
class PreparedTransaction(WriterCommitMessage):
    """A task's open transaction (None: the task had no rows and opened none), and the
    prefix of its write's transactional ids, which name those of tasks that failed."""

    transaction: Transaction | None
    records: int
    log_topic: str | None
    prefix: str


@dataclass(frozen=True)
class AlreadyDecided(WriterCommitMessage):
    """A task of a replayed micro-batch whose transactions the commit log already holds."""

    log_topic: str


def job_prefix() -> str:
    """The transactional id prefix of one batch write (``df.write``), made on the driver."""
    return f"gregor-spark-write-{uuid.uuid4()}"


def write_in_transaction(batches: Iterable[RecordColumns], options: SinkOptions,
                         write_prefix: str | None) -> WriterCommitMessage:
    """Phase one, in a task: every row in one open transaction, flushed.

    ``write_prefix`` names a batch write's transactions; a streaming task names them
    after its query, which keeps its id across restarts from the checkpoint.
    """
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once sink writes in Spark tasks only")
    settings = FetchSettings.from_config(options.client_config)
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    topic = None
    if write_prefix is None:
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise RuntimeError("a streaming task without Spark's query and batch ids")
        topic = log_topic(query_id)
        decided = last_decision(settings, topic)
        if decided is not None and decided.batch_id >= int(batch_id):
            return AlreadyDecided(topic)
    prefix = write_prefix or f"gregor-spark-{query_id}"
    transactional_id = _transactional_id(prefix, context.partitionId())
    producer: TransactionalProducer | None = None
    try:
        for columns in batches:
            # Opened with the first rows: an empty task leaves no transaction behind.
            if producer is None:
                producer = TransactionalProducer(settings, transactional_id,
                                                 options.transaction_timeout_ms)
                if write_prefix is not None and known(settings, _abort_mark(write_prefix)):
                    raise TransactionFailed(f"{transactional_id}: the write was aborted")
            producer.add(*columns, int(time.time() * 1000))
        if producer is None:
            return PreparedTransaction(None, 0, topic, prefix)
        return PreparedTransaction(producer.flush(), producer.records, topic, prefix)
    finally:
        if producer is not None:
            producer.close()


def commit(messages: Sequence[WriterCommitMessage | None], batch_id: int | None,
           options: SinkOptions) -> int:
    """Phase two, on the driver: decide, then commit; the number of records committed
    (0 for a replay, whose records were counted the first time)."""
    settings = FetchSettings.from_config(options.client_config)
    replayed = [m for m in messages if isinstance(m, AlreadyDecided)]
    prepared = _prepared(messages)
    if replayed:
        if prepared:
            end_transactions(settings, prepared, commit=False)
            raise RuntimeError(f"micro-batch {batch_id}: tasks disagree on whether it was "
                               "already decided")
        decision = last_decision(settings, replayed[0].log_topic)
        if decision is None or decision.batch_id != batch_id:
            raise RuntimeError(f"micro-batch {batch_id} replayed, but the commit log holds "
                               f"{decision}")
        log.info("micro-batch %d replayed: committing its %d recorded transactions again",
                 batch_id, len(decision.transactions))
        end_transactions(settings, decision.transactions, commit=True)
        return 0
    topic = next((m.log_topic for m in messages
                  if isinstance(m, PreparedTransaction) and m.log_topic), None)
    if topic is not None and batch_id is not None and prepared:
        write_decision(settings, options.client_config, topic,
                       BatchDecision(batch_id, tuple(prepared)))
    end_transactions(settings, prepared, commit=True)
    return sum(m.records for m in messages if isinstance(m, PreparedTransaction))


def abort(messages: Sequence[WriterCommitMessage | None], batch_id: int | None,
          options: SinkOptions, write_prefix: str | None = None) -> None:
    """Abort the tasks' transactions, unless the micro-batch was already decided: then
    they belong to the commit, which its replay completes (Spark also calls ``abort``
    when ``commit`` failed).

    A task that failed has no message (None, at its partition's place), and its
    transaction, if it had sent anything, is open: nothing of the task ends it, and a
    batch write is never replayed. Left alone, it would hold back read_committed
    readers of every partition it wrote until its timeout; so its id's producer is
    fenced, which aborts it. The ids' prefix is ``write_prefix`` for a batch write; a
    micro-batch's is in its other tasks' messages (with none, its restart fences them).

    The task's Python worker may outlive the task, though: when the task's input fails,
    Spark ends the worker's input at a batch boundary, which the worker takes for the
    end of its rows, and it may begin its transaction after the fence. So a batch
    write's abort first leaves a mark (an id of its own, made known to the
    coordinators), and a writer that finds the mark after beginning refuses to go on;
    one that began before the mark was made is aborted by the fence after it. A
    micro-batch can leave no such mark, since its replay reuses its ids: there, the
    replay's InitProducerId aborts what such a worker left.
    """
    settings = FetchSettings.from_config(options.client_config)
    prepared = _prepared(messages)
    topic = next((m.log_topic for m in messages
                  if isinstance(m, PreparedTransaction | AlreadyDecided) and m.log_topic), None)
    if topic is not None and batch_id is not None:
        decision = last_decision(settings, topic)
        if decision is not None and decision.batch_id >= batch_id:
            log.warning("micro-batch %d failed after its transactions were recorded; they "
                        "stay open until its replay commits them", batch_id)
            return
    if prepared:
        end_transactions(settings, prepared, commit=False)
    prefix = write_prefix or next(
        (m.prefix for m in messages if isinstance(m, PreparedTransaction)), None)
    marks = [] if write_prefix is None else [_abort_mark(write_prefix)]
    if prefix is not None:
        fence(settings, marks + [_transactional_id(prefix, partition)
                                 for partition, m in enumerate(messages) if m is None],
              options.transaction_timeout_ms)


def _transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def _abort_mark(write_prefix: str) -> str:
    return f"{write_prefix}-aborted"


def _prepared(messages: Iterable[WriterCommitMessage | None]) -> list[Transaction]:
    return [m.transaction for m in messages
            if isinstance(m, PreparedTransaction) and m.transaction is not None]
