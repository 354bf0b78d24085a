"""Exactly-once delivery of a DataFrame into a date-partitioned Parquet directory.

Spark may run a micro-batch twice: the process can die after the batch's output was
written but before the checkpoint recorded it, and on restart the same batch id is run
again with the same input.  Writing straight into the output directory would then
duplicate rows.  Instead every batch is written under a *label* (``batch-<id>``):

1. Spark writes the batch to ``_staging/<label>/`` (overwritten by a re-run);
2. files left in the output by an earlier, interrupted attempt of the same label are
   removed, and each staged file is renamed to ``date=<day>/<label>-<file>`` (a rename
   within one filesystem is atomic, so no reader sees half a file);
3. ``_commits/<label>.json`` is written atomically: the batch is complete.

A label that has a commit file is skipped on a re-run, and one without is redone from
scratch, so each batch's rows land exactly once.  Spark and pyarrow ignore the
``_``-prefixed directories when they read the output.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pyspark.sql import DataFrame

PARTITION_COLUMN = "date"
COMMITS_DIR = "_commits"
STAGING_DIR = "_staging"


def is_committed(output: Path, label: str) -> bool:
    return (output / COMMITS_DIR / f"{label}.json").exists()


def commit(rows: DataFrame, output: Path, label: str) -> list[str]:
    """Write ``rows`` (with a ``date`` column) under ``label``, replacing whatever the
    label held before; returns the committed files, relative to ``output``."""
    staging = output / STAGING_DIR / label
    rows.write.mode("overwrite").partitionBy(PARTITION_COLUMN).parquet(str(staging))
    for stale in output.glob(f"{PARTITION_COLUMN}=*/{label}-*"):
        stale.unlink()
    committed = []
    for staged in sorted(staging.glob(f"{PARTITION_COLUMN}=*/*.parquet")):
        target = output / staged.parent.name / f"{label}-{staged.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, target)
        committed.append(str(target.relative_to(output)))
    _write_atomically(
        output / COMMITS_DIR / f"{label}.json",
        json.dumps({"label": label, "files": committed}, indent=1),
    )
    shutil.rmtree(staging)
    return committed


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
