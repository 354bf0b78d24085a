"""The sections other benchmarks keep in docs/benchmarks.md (bench.cluster_bench's and
bench.txn_bench's tables) survive ``python -m bench`` writing the document anew."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")  # bench's own dependency (scripts/bench.sh installs it)

from bench.report import write_report  # noqa: E402
from bench.results import Results  # noqa: E402
from bench.sections import kept_sections, write_section  # noqa: E402


def test_a_section_is_replaced_in_place_and_survives_a_new_report(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    write_report(Results(quick=True, started="first-run"), out)
    write_section(out, "cluster_bench", "## Replicated cluster\n\nfirst figures")
    write_section(out, "txn_bench", "## Transactions\n\ntheir figures")
    write_section(out, "cluster_bench", "## Replicated cluster\n\nnew figures")
    text = out.read_text()
    assert "first figures" not in text
    assert text.index("new figures") < text.index("their figures")

    write_report(Results(quick=True, started="second-run"), out)
    text = out.read_text()
    assert "second-run" in text and "first-run" not in text
    assert kept_sections(out) == [
        "<!-- cluster_bench -->\n## Replicated cluster\n\nnew figures\n<!-- /cluster_bench -->\n",
        "<!-- txn_bench -->\n## Transactions\n\ntheir figures\n<!-- /txn_bench -->\n"]
    # Written again and again, the document does not grow.
    write_report(Results(quick=True, started="second-run"), out)
    assert out.read_text() == text
