"""A driver of its own for test_sink_exactly_once: one exactly-once streaming query from a
topic to a topic (``availableNow``), run in a process the test can kill -9 with its JVM.

Usage: python sink_crash_query.py BOOTSTRAP SOURCE SINK CHECKPOINT PIDS_FILE
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkContext

from gregor.spark.session import build_session


def main(bootstrap: str, source: str, sink: str, checkpoint: str, pids_file: str) -> None:
    spark = build_session("gregor-sink-crash", master="local[2,4]")
    gateway = SparkContext._gateway
    assert gateway is not None
    Path(pids_file).write_text(f"{os.getpid()} {gateway.proc.pid}")
    query = (
        spark.readStream.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
        .writeStream.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
