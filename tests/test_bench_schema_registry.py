"""The schema registry's benchmark, in its quick mode: it runs to the end and reports
what it measured."""

from __future__ import annotations

import json

from bench import schema_registry_bench


def test_quick_run_reports_both_targets() -> None:
    assert schema_registry_bench.main(["--quick"]) == 0
    result = json.loads((schema_registry_bench.OUT / "schema_registry_bench.json").read_text())
    assert result["schemas"] == 100 and result["registration_s"] > 0
    assert [(load["call"], load["client_processes"]) for load in result["calls"]] == [
        ("GET /schemas/ids/{id}", 2), ("GET /schemas/ids/{id}", 4), ("POST /subjects/{s}", 2)]
    for load in result["calls"]:
        assert load["calls"] > 0 and 0 < load["p50_ms"] <= load["p99_ms"]
        assert load["registry_cores"] > 0 and load["client_cores"] > 0
