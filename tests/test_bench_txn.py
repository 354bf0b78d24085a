"""bench.txn_bench's quick mode: every client's transactional and idempotent producers
run against a real broker, each run read back at read_committed and checked, and the
report holds one produce row per client.

It checks the harness, not speed: no ratio is asserted, only that each client's
transactional runs went through the coordinator (AddPartitionsToTxn and EndTxn seen in
the broker's request metrics) and its idempotent runs did not, so that a client quietly
producing without a transaction cannot pass for a transactional one.
"""

from __future__ import annotations

import pytest

from bench import txn_bench
from bench.txn_bench import (
    IDEMPOTENT_RUN,
    PRODUCE_RUNS,
    TRANSACTIONAL,
    _document,
    breakdown,
    measure,
    produce_workload,
    report,
)

pytest.importorskip("matplotlib")  # the benchmark's own dependency (scripts/bench.sh)


def test_quick_run_measures_every_client() -> None:
    rows, runs = measure(quick=True, pairs=1)

    assert [row.measured for row in rows] == [
        *(produce_workload(TRANSACTIONAL, client) for client in PRODUCE_RUNS),
        "read_committed consume"]
    assert [row.baseline for row in rows[:-1]] == [
        produce_workload(IDEMPOTENT_RUN, client) for client in PRODUCE_RUNS]
    assert all(row.runs == 1 and row.ratio > 0 for row in rows)
    for client, kinds in PRODUCE_RUNS.items():
        for kind in kinds:
            [run] = [r for r in runs if r.workload == produce_workload(kind, client)]
            assert run.records == txn_bench.QUICK_RECORDS
            assert run.broker_ms is not None and run.broker_ms["Produce"] > 0
            transactional = kind == TRANSACTIONAL
            assert (run.broker_ms["AddPartitionsToTxn"] > 0) == transactional, run
            assert (run.broker_ms["EndTxn"] > 0) == transactional, run
            assert (run.broker_ms["AddPartitionsToTxn requests"] >= 1) == transactional, run
            assert (run.commit_ms > 0) == (kind != IDEMPOTENT_RUN), run
    table, phases = report(rows), breakdown(runs)
    for client in PRODUCE_RUNS:
        assert f"| transactional produce ({client}) | idempotent produce ({client}) |" in table
        assert f"| transactional produce ({client}) |" in phases
    document = _document(table, phases, 1, runs, 0.5, "load average 1")
    assert table in document and phases in document
    assert f"{txn_bench.QUICK_RECORDS:,} with kafka-python" in document
