"""``python -m bench``: run the benchmark and write docs/benchmarks.md with its plots."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from bench.clients.kafka import write_librdkafka_log
from bench.plan import FULL, QUICK
from bench.processes import raise_on_sigterm
from bench.report import write_report
from bench.results import Results
from bench.run import SYSTEMS, Run

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, one repetition: a smoke run of every code path")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="report to write (its plots go to img/ beside it)")
    parser.add_argument("--report-only", action="store_true",
                        help="render the report again from the results saved beside --out "
                             "(benchmarks.json), without running anything")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the servers keep their data (default: a new temporary "
                             "directory, removed afterwards); its disk is the one measured")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        write_report(Results.load(args.out.with_suffix(".json")), args.out)
        return 0
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    raise_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="gregor-bench-", dir=args.work_dir))
    logging.basicConfig(level=logging.WARNING)
    write_librdkafka_log(workdir / "librdkafka.log")
    run = Run(QUICK if args.quick else FULL, systems, workdir)
    try:
        results = run.execute()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    write_report(results, args.out)
    run.say(f"wrote {args.out}")
    for failure in run.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
