"""scripts/build-spark-jar.sh, as set-up runs it: nothing to do when the jar matches its
sources, and no failure on a machine without a JDK (the Python source serves there)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gregor.spark import JAR

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-spark-jar.sh"


def test_an_up_to_date_jar_is_left_alone() -> None:
    if not shutil.which("javac"):
        pytest.skip("no JDK here")
    first = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    built = JAR.stat().st_mtime_ns
    again = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stderr == "" and JAR.stat().st_mtime_ns == built


def test_without_a_jdk_it_says_so_and_succeeds(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found
        (tools / tool).symlink_to(found)
    before = JAR.stat().st_mtime_ns if JAR.exists() else None
    run = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": str(tools)})
    assert run.returncode == 0, run.stderr
    assert "no JDK (javac, jar) found" in run.stderr
    assert (JAR.stat().st_mtime_ns if JAR.exists() else None) == before
