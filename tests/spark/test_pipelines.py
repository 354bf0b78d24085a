"""The pipelines end to end: generated input into a real broker, the pipeline in a real
local SparkSession with ``trigger(availableNow=True)``, and its output topics compared with
the same result computed in plain Python from the input events."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from gregor.pipelines import activity, monitoring, retail, warehouse
from gregor.pipelines.generators import (
    CATALOG,
    Event,
    activity_events,
    publish,
    retail_events,
)
from gregor.spark.session import build_session

MINUTE = 60_000
T0 = (int(time.time()) // 3600 - 2) * 3_600_000
"""Event times start on an hour two hours ago: aligned windows, well inside retention."""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """The pipelines' own session (UTC, two shuffle partitions), shared by the module."""
    session = build_session("gregor-pipeline-tests")
    yield session
    session.stop()


def create_topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(30)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def run_to_completion(queries: list[StreamingQuery]) -> None:
    for query in queries:
        assert query.awaitTermination(180), f"{query.name} did not finish"
        assert query.exception() is None


def read_json(spark: SparkSession, bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The JSON values of ``topic`` in offset order per partition (so per key)."""
    rows = (
        spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).load()
        .orderBy("partition", "offset").selectExpr("CAST(value AS STRING) AS v").collect()
    )
    return [json.loads(r.v) for r in rows]


def latest_by(records: list[dict[str, Any]], *fields: str) -> dict[Any, dict[str, Any]]:
    """Changelog semantics: the last record for each key wins."""
    return {tuple(r[f] for f in fields): r for r in records}


def epoch_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# -- retail ----------------------------------------------------------------------------


def retail_topics() -> retail.RetailTopics:
    return retail.RetailTopics(*(unique(n) for n in (
        "sales", "shipments", "stock", "reorders", "price-adjustments")))


def expected_stock(events: list[Event], topics: retail.RetailTopics) -> dict[str, int]:
    stock = {p.product_id: p.initial_stock for p in CATALOG}
    for e in events:
        sign = -1 if e.topic == topics.sales else 1
        stock[e.value["product_id"]] += sign * e.value["quantity"]
    return stock


def expected_units_per_window(events: list[Event], topics: retail.RetailTopics,
                              ) -> dict[tuple[str, int], int]:
    """Units sold per product in 10-minute windows sliding by 5 minutes."""
    units: Counter[tuple[str, int]] = Counter()
    for e in events:
        if e.topic != topics.sales:
            continue
        last_start = e.ts_ms - e.ts_ms % (5 * MINUTE)
        for start in (last_start, last_start - 5 * MINUTE):
            units[e.value["product_id"], start] += e.value["quantity"]
    return units


def check_retail(spark: SparkSession, bootstrap: str, topics: retail.RetailTopics,
                 events: list[Event], rule: retail.PriceRule) -> None:
    stock = expected_stock(events, topics)
    got_stock = latest_by(read_json(spark, bootstrap, topics.stock), "product_id")
    assert {k[0]: r["stock"] for k, r in got_stock.items()} == stock

    reorders = read_json(spark, bootstrap, topics.reorders)
    points = {p.product_id: p.reorder_point for p in CATALOG}
    assert all(r["stock"] < r["reorder_point"] == points[r["product_id"]] for r in reorders)
    below = {p for p, s in stock.items() if s < points[p]}
    assert below, "the input should drive some products below their reorder point"
    latest_reorders = latest_by(reorders, "product_id")
    assert {p for (p,) in latest_reorders} >= below
    assert all(latest_reorders[(p,)]["stock"] == stock[p] for p in below)

    crossed = {k: u for k, u in expected_units_per_window(events, topics).items()
               if u >= rule.threshold}
    assert crossed, "the input should cross the price threshold somewhere"
    adjustments = read_json(spark, bootstrap, topics.price_adjustments)
    got: dict[tuple[str, int], int] = defaultdict(int)
    for a in adjustments:
        key = (a["product_id"], epoch_ms(a["window_start"]))
        got[key] = max(got[key], a["units_sold"])
    assert dict(got) == crossed


RETAIL_RULE = retail.PriceRule(threshold=50)


def make_retail_input(topics: retail.RetailTopics, count: int = 400) -> list[Event]:
    return list(islice(retail_events(7, T0, 3000, topics.sales, topics.shipments), count))


def test_retail_matches_plain_python(spark: SparkSession, broker: Any, tmp_path: Path) -> None:
    topics = retail_topics()
    create_topics(broker.bootstrap, *topics.__dict__.values())
    events = make_retail_input(topics)
    publish(events, {"bootstrap.servers": broker.bootstrap}, reports_topic=None)

    run_to_completion(retail.start(spark, broker.bootstrap, tmp_path / "checkpoint", topics,
                                   RETAIL_RULE, available_now=True, max_offsets=150))

    check_retail(spark, broker.bootstrap, topics, events, RETAIL_RULE)


def test_retail_stop_and_restart_from_checkpoint(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topics = retail_topics()
    create_topics(broker.bootstrap, *topics.__dict__.values())
    events = make_retail_input(topics)
    config = {"bootstrap.servers": broker.bootstrap}
    checkpoint = tmp_path / "checkpoint"

    publish(events[:200], config, reports_topic=None)
    run_to_completion(retail.start(spark, broker.bootstrap, checkpoint, topics, RETAIL_RULE,
                                   available_now=True))
    publish(events[200:], config, reports_topic=None)
    run_to_completion(retail.start(spark, broker.bootstrap, checkpoint, topics, RETAIL_RULE,
                                   available_now=True))

    check_retail(spark, broker.bootstrap, topics, events, RETAIL_RULE)


# -- activity --------------------------------------------------------------------------


def expected_page_counts(events: list[Event]) -> dict[tuple[str, int], dict[str, int]]:
    counts: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for e in events:
        window = counts[e.value["page"], e.ts_ms - e.ts_ms % MINUTE]
        window["events"] += 1
        window[{"view": "views", "click": "clicks", "search": "searches"}[e.value["action"]]] += 1
    return {k: {c: v[c] for c in ("events", "views", "clicks", "searches")}
            for k, v in counts.items()}


def expected_sessions(events: list[Event], gap_ms: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Sessions as Spark's session_window makes them: a session ends ``gap_ms`` after its
    last event; an event before that joins it."""
    sessions: dict[tuple[str, int], dict[str, Any]] = {}
    open_session: dict[str, tuple[str, int]] = {}
    for e in sorted(events, key=lambda e: e.ts_ms):
        user = e.value["user_id"]
        key = open_session.get(user)
        if key is None or sessions[key]["end"] <= e.ts_ms:
            key = open_session[user] = (user, e.ts_ms)
            sessions[key] = {"end": 0, "events": 0, "pages": set()}
        session = sessions[key]
        session["end"] = e.ts_ms + gap_ms
        session["events"] += 1
        session["pages"].add(e.value["page"])
    return {k: {"end": s["end"], "events": s["events"], "pages": sorted(s["pages"])}
            for k, s in sessions.items()}


def test_activity_matches_plain_python(spark: SparkSession, broker: Any, tmp_path: Path) -> None:
    settings = activity.ActivitySettings(unique("activity"), unique("activity-summaries"))
    create_topics(broker.bootstrap, settings.activity_topic, settings.summaries_topic)
    # 6.5 s apart: no pause equals the 5-minute gap and no session ends exactly at the
    # final watermark, so there are no boundary cases.
    events = list(islice(activity_events(3, T0, 6500, settings.activity_topic), 300))
    publish(events, {"bootstrap.servers": broker.bootstrap}, reports_topic=None)

    run_to_completion(activity.start(spark, broker.bootstrap, tmp_path / "checkpoint",
                                     settings, available_now=True))

    summaries = read_json(spark, broker.bootstrap, settings.summaries_topic)
    counts = latest_by([s for s in summaries if s["kind"] == "page_counts"],
                       "page", "window_start")
    assert {(page, epoch_ms(start)): {c: r[c] for c in ("events", "views", "clicks", "searches")}
            for (page, start), r in counts.items()} == expected_page_counts(events)
    # Sessions are published once closed: ended before the final watermark.
    watermark = max(e.ts_ms for e in events) - 2 * MINUTE
    closed = {k: s for k, s in expected_sessions(events, 5 * MINUTE).items()
              if s["end"] <= watermark}
    assert closed
    sessions = [s for s in summaries if s["kind"] == "session"]
    assert len(sessions) == len(closed)
    assert {(s["user_id"], epoch_ms(s["session_start"])): {
        "end": epoch_ms(s["session_end"]), "events": s["events"], "pages": s["pages"]}
        for s in sessions} == closed


# -- warehouse -------------------------------------------------------------------------

DAY = 24 * 60 * MINUTE


def warehouse_input(bootstrap: str) -> tuple[str, list[Event]]:
    """300 events, 6 s apart, from 20 minutes before last midnight (UTC): two dates."""
    topic = unique("warehouse")
    create_topics(bootstrap, topic)
    midnight = int(time.time() * 1000) // DAY * DAY
    events = list(islice(activity_events(5, midnight - 20 * MINUTE, 6000, topic), 300))
    publish(events, {"bootstrap.servers": bootstrap}, reports_topic=None)
    return topic, events


def parquet_rows(spark: SparkSession, output: Path) -> Counter[tuple[str, str]]:
    rows = spark.read.parquet(str(output)).select("value", "date").collect()
    return Counter((r.value, r.date.isoformat()) for r in rows)


def expected_rows(events: list[Event]) -> Counter[tuple[str, str]]:
    return Counter(
        (json.dumps(e.value), datetime.fromtimestamp(e.ts_ms / 1000, UTC).date().isoformat())
        for e in events)


def test_warehouse_range_into_parquet_once(spark: SparkSession, broker: Any,
                                          tmp_path: Path) -> None:
    topic, events = warehouse_input(broker.bootstrap)
    start, end = events[50].ts_ms, events[250].ts_ms
    output = tmp_path / "warehouse"

    assert warehouse.export_range(spark, broker.bootstrap, topic, start, end, output)
    expected = expected_rows(events[50:250])
    assert len({date for _, date in expected}) == 2
    assert parquet_rows(spark, output) == expected

    assert not warehouse.export_range(spark, broker.bootstrap, topic, start, end, output)
    assert parquet_rows(spark, output) == expected


def test_warehouse_stream_replayed_batch_adds_nothing(spark: SparkSession, broker: Any,
                                                      tmp_path: Path) -> None:
    topic, events = warehouse_input(broker.bootstrap)
    output, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"

    def run() -> list[int]:
        """Runs to completion; returns the ids of the micro-batches run."""
        query = warehouse.start_streaming(spark, broker.bootstrap, topic, output, checkpoint,
                                          available_now=True, max_offsets=100)
        run_to_completion([query])
        return [p["batchId"] for p in query.recentProgress]

    assert run() == [0, 1, 2]
    assert parquet_rows(spark, output) == expected_rows(events)
    # Forget that the last micro-batch was committed: Spark runs it again, same batchId.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    assert run() == [2]
    assert parquet_rows(spark, output) == expected_rows(events)


# -- monitoring ------------------------------------------------------------------------


def test_monitoring_flags_windows_short_of_what_producers_sent(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topics = retail_topics()
    settings = monitoring.MonitoringSettings(
        (topics.sales, topics.shipments), unique("producer-reports"), unique("alerts"))
    create_topics(broker.bootstrap, topics.sales, topics.shipments, settings.reports_topic,
                  settings.alerts_topic)
    config = {"bootstrap.servers": broker.bootstrap}
    events = make_retail_input(topics, 200)
    sent = publish(events, config, reports_topic=settings.reports_topic)
    assert sent == Counter((e.topic, e.ts_ms - e.ts_ms % MINUTE) for e in events)
    # A producer reports 5 records in the third window that never arrived.
    lossy_window = T0 + 2 * MINUTE
    lost = Event(settings.reports_topic, topics.sales,
                 {"topic": topics.sales, "window_start": lossy_window, "sent": 5}, lossy_window)
    publish([lost], config, reports_topic=None)

    run_to_completion([monitoring.start(spark, broker.bootstrap, tmp_path / "checkpoint",
                                        settings, available_now=True)])

    alerts = read_json(spark, broker.bootstrap, settings.alerts_topic)
    received = sent[topics.sales, lossy_window]
    assert [(a["topic"], epoch_ms(a["window"]["start"]), epoch_ms(a["window"]["end"]),
             a["sent"], a["received"], a["status"]) for a in alerts] == [
        (topics.sales, lossy_window, lossy_window + MINUTE, received + 5, received, "loss")]
