"""Spark through the ``gregor`` data source: how fast is a topic as a Spark table?

Run with ``python -m bench.spark_bench`` (``--help`` for sizes).  For 100-byte and
1 KiB records it measures, with a warmed-up local[2] SparkSession:

* source: a topic aggregated by Spark (count and bytes per partition) through
  ``format("gregor")``, which is the JVM source when set-up built its jar (the run says
  which path it measured, and writes it as ``read_path`` in the JSON);
* source python: the same through ``format("gregor_python")``, the Python data source
  the JVM source falls back to (measured only when ``source`` was the JVM's);
* parquet: the same records, first copied to Parquet by Spark, aggregated the same way;
  the source/parquet ratio says what reading a broker costs next to reading local files
  (the two, and the Python source beside them, are timed in alternating rounds; every
  record's value is distinct random bytes, so Parquet gets no dictionary for free);
* read_range no Spark: what the Python source's tasks run in their Python workers (Fetch,
  record batches scanned into Arrow batches), here in this process over the same ranges,
  one after another; its cores are this process's, so records/s per core is the Python
  part's cost, and the rest of the Python source's CPU is Spark's (IPC to the JVM, rows);
* sink: a Spark-generated DataFrame written to a new topic through the sink;
* sink exactly-once: the same with ``deliveryGuarantee=exactly-once`` (each task writes in
  a transaction, the driver commits them all), whose rate should be at least 70% of the
  at-least-once sink's; its last write is counted again at read_committed.

Every aggregation is checked against what was produced, and the sink's output against
the topic's end offsets, so losing records fails the run instead of looking fast.  CPU
is reported beside each figure (cores = CPU seconds per wall second) for Spark (the JVM
and its Python workers, all children of this process) and for the broker.  It prints a
table and writes ``spark_bench.png`` and ``spark_bench.json`` to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import pyarrow.compute as pc  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from bench.cpu import Stopwatch, Window  # noqa: E402
from gregor.broker.process import BrokerProcess  # noqa: E402
from gregor.spark import jvm_source_loaded  # noqa: E402
from gregor.spark.batch_reader import GregorBatchReader  # noqa: E402
from gregor.spark.offset_lookup import OffsetLookup  # noqa: E402
from gregor.spark.options import Subscription, parse_source_options  # noqa: E402
from gregor.spark.partition_range import PartitionRange  # noqa: E402
from gregor.spark.partition_reader import read_range  # noqa: E402
from gregor.spark.session import build_session  # noqa: E402
from gregor.spark.standalone import StandaloneCluster  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
PARTITIONS = 4
SIZES = {100: "100 B", 1024: "1 KiB"}


@dataclass(frozen=True)
class Measurement:
    """One measured path for one record size (median window of the repetitions)."""

    path: str
    record_bytes: int
    records: int
    seconds: float
    spark_cores: float
    broker_cores: float | None
    read_path: str | None = None
    """For reads through a topic: "jvm" or "python", the source's path that was measured."""

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / self.seconds / 1e6


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__)
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="100-byte records (1 KiB: a quarter)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per path")
    parser.add_argument(
        "--repeated-value", action="store_true",
        help="every record the same value (Parquet's best case: one dictionary entry), as "
             "this bench wrote topics before 2026-11-25")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--workers", action="store_true",
        help="also read 100 B records on a standalone cluster of 1, then 2 one-core workers")
    return parser.parse_args()


def start_spark() -> SparkSession:
    return build_session("gregor-spark-bench", **{"spark.driver.memory": "2g"})


def read_path(spark: SparkSession) -> str:
    """Which source ``format("gregor")`` is in this session."""
    return "jvm" if jvm_source_loaded(spark) else "python"


def describe_path(path: str) -> str:
    return ("the JVM source (gregor-spark.jar)" if path == "jvm"
            else "the Python data source (no JVM jar: no JDK at set-up?)")


def fill_topic(bootstrap: str, records: int, size: int, repeated_value: bool = False,
               ) -> tuple[str, dict[int, tuple[int, int]]]:
    """A new topic of ``records`` records of ``size`` bytes; per partition (count, bytes)."""
    topic = f"spark-bench-{size}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    # Every value its own random bytes, as a topic's records are: one value repeated would
    # let Parquet store it once, in a dictionary, and read it for nothing.
    values = os.urandom(size if repeated_value else size * records)
    for index in range(records):
        partition = index % PARTITIONS
        payload = values if repeated_value else values[index * size:(index + 1) * size]
        while True:
            try:
                producer.produce(topic, payload, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0, "records left undelivered"
    counts = {p: len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)}
    return topic, {p: (count, count * size) for p, count in counts.items()}


def aggregate(df: DataFrame) -> dict[int, tuple[int, int]]:
    rows = (
        df.selectExpr("partition", "length(value) AS size")
        .groupBy("partition")
        .agg({"*": "count", "size": "sum"})
        .collect()
    )
    return {r.partition: (r["count(1)"], r["sum(size)"]) for r in rows}


def read_without_spark(bootstrap: str, topic: str,
                       expected: dict[int, tuple[int, int]]) -> None:
    """The source's ranges, planned and read as its tasks read them, in this process."""
    options = parse_source_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False)
    got: dict[int, tuple[int, int]] = {}
    for part in GregorBatchReader(options).partitions():
        assert isinstance(part, PartitionRange)
        for batch in read_range(part):
            count, size = got.get(part.partition, (0, 0))
            got[part.partition] = (
                count + batch.num_rows,
                size + pc.sum(pc.binary_length(batch.column("value"))).as_py())
    if got != expected:
        raise AssertionError(f"read_range read {got}, produced {expected}")


def check(df: DataFrame, expected: dict[int, tuple[int, int]]) -> None:
    got = aggregate(df)
    if got != expected:
        raise AssertionError(f"aggregated {got}, produced {expected}")


def measure(
    path: str,
    size: int,
    records: int,
    repeat: int,
    watch: Stopwatch,
    run: Callable[[], None],
    broker_known: bool,
    path_read: str | None = None,
) -> Measurement:
    """Time ``run()`` ``repeat`` times after one warm-up and keep the median window."""
    run()
    windows: list[Window] = []
    for _ in range(repeat):
        watch.start()
        run()
        windows.append(watch.stop())
    return _median(path, size, records, windows, broker_known, path_read)


def measure_against(
    paths: dict[str, Callable[[], None]],
    size: int,
    records: int,
    repeat: int,
    watch: Stopwatch,
    broker_known: bool,
    path_read: dict[str, str],
) -> list[Measurement]:
    """The median window of each path, timed by ``measure_rounds``."""
    windows = measure_rounds(paths, repeat, watch)
    return [_median(name, size, records, windows[name], broker_known, path_read.get(name))
            for name in paths]


def measure_rounds(paths: dict[str, Callable[[], None]], repeat: int,
                   watch: Stopwatch) -> dict[str, list[Window]]:
    """Time paths that are compared with each other in alternating rounds (ABBA...), each
    warmed up first: measured one after the other, the first pays for the JIT compiling
    Spark's shared code and the machine's drift lands on one side. Each path's windows,
    round by round."""
    for run in paths.values():
        run()
    windows: dict[str, list[Window]] = {name: [] for name in paths}
    order = list(paths)
    for round_ in range(repeat):
        for name in order if round_ % 2 == 0 else reversed(order):
            watch.start()
            paths[name]()
            windows[name].append(watch.stop())
    return windows


def _median(path: str, size: int, records: int, windows: list[Window], broker_known: bool,
            path_read: str | None) -> Measurement:
    window = sorted(windows, key=lambda w: w.seconds)[len(windows) // 2]
    return Measurement(
        path,
        size,
        records,
        window.seconds,
        window.client_cores,
        window.server_cores if broker_known else None,
        path_read,
    )


def bench_size(
    spark: SparkSession,
    bootstrap: str,
    size: int,
    records: int,
    args: argparse.Namespace,
    watch: Stopwatch,
    here: Stopwatch,
    broker_known: bool,
    work: Path,
) -> list[Measurement]:
    """``watch`` counts Spark's CPU, ``here`` this process's."""
    topic, expected = fill_topic(bootstrap, records, size, args.repeated_value)

    def topic_df(source_format: str) -> DataFrame:
        return (spark.read.format(source_format).option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load())

    source = topic_df("gregor")
    parquet_path = work / f"records-{size}.parquet"
    source.write.mode("overwrite").parquet(str(parquet_path))
    parquet = spark.read.parquet(str(parquet_path))
    path = read_path(spark)

    compared: dict[str, Callable[[], None]] = {
        "source": partial(check, source, expected),
        "parquet": partial(check, parquet, expected),
    }
    if path == "jvm":
        compared["source python"] = partial(check, topic_df("gregor_python"), expected)
    results = measure_against(compared, size, records, args.repeat, watch, broker_known,
                              {"source": path, "source python": "python"})
    results.append(
        measure("read_range no Spark", size, records, args.repeat, here,
                partial(read_without_spark, bootstrap, topic, expected), broker_known))
    generated = (
        spark.range(records, numPartitions=2)
        .selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS value")
        .cache()
    )
    generated.count()
    lookup = OffsetLookup({"bootstrap.servers": bootstrap})

    targets: list[str] = []

    def write(guarantee: str = "at-least-once") -> None:
        target = f"spark-bench-sink-{size}-{uuid.uuid4().hex[:8]}"
        targets.append(target)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(target, PARTITIONS, 1)])[target].result(30)
        generated.write.format("gregor").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", target).option("deliveryGuarantee", guarantee).save()
        written = sum(
            lookup.latest(lookup.partitions(Subscription(topics=frozenset({target})))).values()
        )
        # A committed transaction leaves one marker in each partition it wrote to.
        markers = 0 if guarantee == "at-least-once" else 2 * PARTITIONS
        if not records <= written <= records + markers:
            raise AssertionError(f"sink wrote {written} records, expected {records}")

    results.append(measure("sink", size, records, args.repeat, watch, write, broker_known))
    results.append(measure("sink exactly-once", size, records, args.repeat, watch,
                           partial(write, "exactly-once"), broker_known))
    committed = (
        spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", targets[-1]).option("kafka.isolation.level", "read_committed")
        .load().count()
    )
    if committed != records:
        raise AssertionError(f"exactly-once sink: {committed} records committed, not {records}")
    generated.unpersist()
    return results


def bench_workers(
    bootstrap: str, records: int, args: argparse.Namespace, watch: Stopwatch,
    broker_known: bool, work: Path,
) -> list[Measurement]:
    """The source on a standalone cluster (from the PySpark package) of one, then two
    one-core workers: a topic's partitions are read by every worker's executor, so
    records/s should grow with the workers (this machine's cores permitting)."""
    topic, expected = fill_topic(bootstrap, records, 100)
    results = []
    for workers in (1, 2):
        with StandaloneCluster(work / f"workers-{workers}", workers=workers, cores=1) as cluster:
            spark = build_session("gregor-spark-bench-workers", cluster.url, **{
                "spark.cores.max": str(workers), "spark.executor.cores": "1",
                "spark.executor.memory": "1g"})
            try:
                source = (spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
                          .option("subscribe", topic).load())
                label = f"source on {workers} worker{'s' if workers > 1 else ''}"
                results.append(measure(label, 100, records, args.repeat, watch,
                                       partial(check, source, expected), broker_known,
                                       read_path(spark)))
            finally:
                spark.stop()
    return results


def print_table(results: list[Measurement], repeated_value: bool) -> None:
    paths = {m.read_path for m in results if m.path == "source"}
    for path in sorted(paths):
        print(f'source = format("gregor") through {describe_path(path)}')
    print("values: " + ("one value repeated in every record (--repeated-value)" if repeated_value
                        else "every record's value distinct random bytes"))
    print(
        f"{'record':>7} {'path':<19} {'records':>10} {'records/s':>12} {'MB/s':>8} "
        f"{'spark cores':>11} {'broker cores':>12}"
    )
    for m in results:
        broker = "n/a" if m.broker_cores is None else f"{m.broker_cores:.2f}"
        print(
            f"{SIZES[m.record_bytes]:>7} {m.path:<19} {m.records:>10,} {m.records_per_s:>12,.0f} "
            f"{m.mb_per_s:>8.1f} {m.spark_cores:>11.2f} {broker:>12}"
        )
    for size, label in SIZES.items():
        rate = {m.path: m.records_per_s for m in results if m.record_bytes == size}
        for name in ("source", "source python"):
            if name in rate and "parquet" in rate:
                print(
                    f"{label}: {name} / parquet = {rate[name] / rate['parquet']:.2f} "
                    "(1.00 = a topic reads as fast as local Parquet)"
                )
        alone = next((m for m in results
                      if m.path == "read_range no Spark" and m.record_bytes == size), None)
        for m in results:
            if m.record_bytes == size and m.path in ("source", "source python"):
                per_record = m.spark_cores / m.records_per_s * 1e6
                print(f"{label}: CPU per record: {m.path} ({m.read_path}) in Spark "
                      f"{per_record:.2f} us")
        if alone:
            python = alone.spark_cores / alone.records_per_s * 1e6
            print(f"{label}: CPU per record: the Python source's part alone (read_range) "
                  f"{python:.2f} us")
        if "sink" in rate and "sink exactly-once" in rate:
            print(f"{label}: sink exactly-once / at-least-once = "
                  f"{rate['sink exactly-once'] / rate['sink']:.2f} (target: at least 0.70)")
    one, two = (next((m.records_per_s for m in results if m.path == f"source on {n}"), None)
                for n in ("1 worker", "2 workers"))
    if one and two:
        print(f"source on 2 workers / 1 worker = {two / one:.2f}")


def plot(results: list[Measurement], path: Path) -> None:
    paths = [name for name in ("source", "source python", "parquet", "sink",
                               "sink exactly-once") if any(m.path == name for m in results)]
    labels = {
        "source": "topic → Spark agg",
        "source python": "topic → Spark agg, Python source",
        "parquet": "Parquet → Spark agg",
        "sink": "Spark → topic",
        "sink exactly-once": "Spark → topic, exactly-once",
    }
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(paths)
    for i, name in enumerate(paths):
        values = [
            next(m.records_per_s for m in results if m.path == name and m.record_bytes == size)
            / 1e3
            for size in SIZES
        ]
        positions = [k + (i - (len(paths) - 1) / 2) * width for k in range(len(SIZES))]
        ax.bar(positions, values, width, label=labels[name])
    ax.set_xticks(range(len(SIZES)))
    ax.set_xticklabels([f"{label} records" for label in SIZES.values()])
    ax.set_ylabel("thousand records/s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    read_path = next((m.read_path for m in results if m.path == "source"), None)
    ax.set_title(f"Spark local[2] through the gregor source, {read_path} path (median of runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker = BrokerProcess(work / "broker").start()
            bootstrap = broker.bootstrap
        spark = start_spark()

        def broker_pids() -> list[int]:
            return [broker.proc.pid] if broker is not None and broker.proc is not None else []

        watch = Stopwatch(broker_pids, client_descendants=True)
        here = Stopwatch(broker_pids)
        results: list[Measurement] = []
        for size in SIZES:
            records = args.records if size == 100 else args.records // 4
            results += bench_size(
                spark, bootstrap, size, records, args, watch, here, broker is not None, work
            )
        spark.stop()
        if args.workers:
            results += bench_workers(bootstrap, args.records, args, watch, broker is not None,
                                     work)
        print_table(results, args.repeated_value)
        args.out.mkdir(parents=True, exist_ok=True)
        plot(results, args.out / "spark_bench.png")
        rows = [{**asdict(m), "records_per_s": m.records_per_s} for m in results]
        (args.out / "spark_bench.json").write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.out / 'spark_bench.png'} and spark_bench.json")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
