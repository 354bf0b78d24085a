"""docs/benchmarks.md from a run's results: targets, tables of medians, ratios, plots.

Everything in the document is generated, except the analysis kept by hand in
``bench/findings.md`` (profiles, what limits gregor, what to change), which is
appended as it is so that a new run does not lose it, and the sections other
benchmarks keep in the document (bench.sections), carried over from the old one.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.plots import write_plots
from bench.results import Results
from bench.sections import kept_sections
from bench.summary import GREGOR, cases, cell, ratio, systems, targets, unmeasured

FINDINGS = Path(__file__).with_name("findings.md")
_PYTHON_CLIENT = " †"  # beside a system whose figures its pure-Python client sets

WORKLOADS = [
    ("produce", "Produce throughput",
     "From the first send to the last acknowledgement."),
    ("consume", "Consume throughput",
     "The same records read back from the start by each system's client library "
     "(librdkafka for Kafka-protocol systems), until the last record has arrived; every "
     "value is kept and checked against the one sent after the clock stops."),
    ("fetch", "Consume throughput, bare Fetch requests",
     "Kafka-protocol systems only: the same records read with Fetch requests back to back "
     "(4 MiB per partition, 32 MiB per request), every batch CRC-checked and its records "
     "counted, nothing done per record: the broker's fetch path without librdkafka's "
     "per-record cost."),
]

METHOD = """\
- **One system under load at a time, in interleaved rounds.** All servers are
  started fresh at the beginning; then each workload is run by every system in
  turn, repetition by repetition, in an order that rotates with the repetition,
  so that a neighbour's burst of work or a drift of the machine falls on all
  systems alike. The measured server shares the 2 cores with its load generator;
  the others sit idle (their idle CPU is in the notes below). Each workload's
  topic is deleted after it, and every server is stopped and its data deleted at
  the end. Latency and the offset lookup run one system at a time. Before the
  rounds each system does one small unrecorded produce and consume (first-use
  work, such as gregor creating `__consumer_offsets`, is not charged to a run),
  and before every timed phase the page cache is written back (`sync`), so that
  no run pays for the disk writeback of the one before it.
- **Produce** sends every record of the run round-robin over the partitions
  (record k to partition k mod n), and the clock runs from the first send to the
  last acknowledgement. Every value is distinct: record k carries its sequence
  number k in its first 8 bytes, then one of 4,096 random payloads in turn; all
  values are built before the clock starts, so numbering them costs the load
  generator nothing. **Consume** then reads the same records from the start and
  stops the clock when the last one has arrived. Every run is **verified**: each
  partition must give back exactly the records sent to it, each once, in the
  order sent and unaltered (count, uniqueness and per-partition order, by
  sequence number and value); a run that fails verification is reported as
  failed, not measured. The consumer keeps every value it received and compares
  them once the clock has stopped: any check per record inside the window takes
  a large share of a Python consumer's time and caps every system at the load
  generator's speed. Bare Fetch reads (below) check every batch's CRC and count
  records; their values are those the librdkafka consumer has just verified.
- **The load generator runs without Python's garbage collector** during every
  timed loop (produce, consume, the latency sender and consumer): a consumer
  keeps every value until verification, and the collector walking those again
  and again halved the Redis consumer's speed on 100 B records. All systems'
  clients get the same.
- **Kafka protocol** (gregor, Tansu): confluent-kafka (librdkafka) with the
  same settings for both: `linger.ms=5`, `batch.size=1000000`, no compression,
  no idempotence, `acks` as stated, records handed over with `produce_batch`
  (4,096 records per round, one call per partition: with `produce()` per record
  the Python loop would set the pace); consumers assign partitions (no group protocol) with
  `fetch.queue.backoff.ms=10`, `queued.min.messages=1000000`.
- **Redis Streams**: a topic of N partitions is N stream keys. XADD commands are
  RESP-encoded before the clock starts and pipelined (1,000 per write, 8 writes
  in flight), every reply read and checked; XREADGROUP ... NOACK on one stream
  at a time, in turn, with two reads in flight, each asking for about 1 MiB
  (COUNT 1,024 records of 1 KiB, 10,485 of 100 B): Redis builds a whole reply
  before sending any of it, and the earlier COUNT 10000 on all 8 streams at once
  made 80 MB replies that server and client took turns on (bench/findings.md).
  Redis has no producer acks setting: it runs acks=1 only, and its acks=all
  cells are empty.
- **NATS JetStream**: a topic of N partitions is N file-backed streams. Publish
  is asynchronous with a reply subject, every ack counted and checked, at most
  20,000 unacknowledged; consume is a pull consumer (`CONSUMER.MSG.NEXT`, batches
  of up to 5,000, two outstanding, at most 8 MB requested at once since
  nats-server drops a client with 64 MB pending). No acks setting either. Its
  client, nats-py, is pure Python and handles every message and acknowledgement
  in Python: NATS's figures, and gregor's ratios to them, mostly measure that
  client (marked †). No native NATS load generator is installable here: Debian
  packages nats-server but not the `nats` CLI (`nats bench`), and neither PyPI
  nor npm carries it.
- **End-to-end latency**: 100 B records, one partition, at half of the system's
  own median produce rate for that case (equal relative load) but at most
  50,000 records/s, which the Python sender can pace without queueing records
  itself (the achieved rate is shown beside the offered one); producer and
  consumer in separate processes, each value stamped with CLOCK_MONOTONIC at
  send; the first second is warm-up and discarded. librdkafka uses
  `linger.ms=1` here.
- **Offset lookup** (gregor only): a small and a large log of 1 KiB records are
  written through gregor's storage API, then a bare Fetch v4 request for 1 MiB
  is timed on an open connection, at random offsets among the first 10,000
  records (start) or among the last 10,000 (tail), interleaved.
- **CPU** is reported as cores used (CPU seconds per wall second) of the load
  generator (c) and of the server (s) during the timed window, from /proc.
- **Limits**: O_DIRECT sequential write (ending with fsync) and read of 1 MiB
  blocks in the data directory (no page cache, so no cache dropping needed),
  a cached re-read of the same file, and one iperf3 TCP stream over loopback.
"""


def _size(n: float) -> str:
    return f"{n / 1e9:g} GB" if n >= 1e9 else f"{n / 1e6:g} MB"


def _rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.0f}k" if x >= 1e4 else f"{x / 1e3:.1f}k"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _python_clients(results: Results) -> set[str]:
    return {name for name, info in results.systems.items() if info.get("python_client")}


def _marked(results: Results, system: str) -> str:
    return system + (_PYTHON_CLIENT if system in _python_clients(results) else "")


def _throughput_section(results: Results, workload: str) -> list[str]:
    names = systems(results, workload)
    peers = [n for n in names if n != GREGOR]
    header = ["workload", *(_marked(results, n) for n in names),
              *(f"gregor / {_marked(results, p)}" for p in peers if GREGOR in names)]
    rows = []
    for case in cases(results):
        row = [case.label]
        for system in names:
            x = cell(results, system, workload, case)
            row.append("—" if x is None else
                       f"{x.mb_per_s:,.1f} MB/s · {_rate(x.records_per_s)} rec/s<br>"
                       f"<sub>cpu c {x.client_cores:.2f} · s {x.server_cores:.2f}</sub>")
        if GREGOR in names:
            for peer in peers:
                r = ratio(results, workload, case, peer)
                row.append("—" if r is None else (f"**{r:.2f}×**" if r < 1 else f"{r:.2f}×"))
        rows.append(row)
    lines = _table(header, rows)
    notes = []
    if missing := unmeasured(results, workload):
        notes.append(f"— not measured: {_and(missing)} "
                     f"{'has' if len(missing) == 1 else 'have'} no producer acks setting and "
                     "ran each size and partition count once, shown as acks=1.")
    if python := [n for n in names if n in _python_clients(results)]:
        notes.append(_python_note(python) + ": these figures and gregor's ratios to them "
                     "mostly measure that client, not the server.")
    return lines + [line for note in notes for line in ("", note)]


def _python_note(names: list[str]) -> str:
    return (f"† {_and(names)}: driven by a pure-Python client (its load generator is "
            "under Systems), which sets the pace")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _latency_section(results: Results) -> list[str]:
    rows = [[_marked(results, lat.system), f"{lat.rate:,.0f} / {lat.achieved_rate:,.0f}",
             f"{lat.p50_ms:.2f}",
             f"{lat.p99_ms:.2f}", f"{lat.p999_ms:.2f}", f"{lat.max_ms:.1f}", f"{lat.records:,}",
             f"c {lat.client_cores:.2f} · s {lat.server_cores:.2f}"] for lat in results.latency]
    return _table(["system", "rate offered / achieved (rec/s)", "p50 ms", "p99 ms", "p99.9 ms",
                   "max ms", "records", "cpu"], rows)


def _lookup_section(results: Results) -> list[str]:
    rows = []
    for size in sorted({r.log_bytes for r in results.lookup}):
        at = {r.position: r for r in results.lookup if r.log_bytes == size}
        rows.append([_size(size)] + [f"{at[p].p50_ms:.2f} / {at[p].p99_ms:.2f}"
                                     if p in at else "—" for p in ("start", "tail")])
    return _table(["log size", "start: p50 / p99 ms", "tail: p50 / p99 ms"], rows)


def render(results: Results, plots: dict[str, Path], out: Path) -> str:
    lines = ["# Benchmarks", ""]
    lines.append(f"Generated by `scripts/bench.sh` ({results.machine.get('command', '')}) on "
                 f"{results.started}; the run took {results.seconds / 60:.1f} minutes. "
                 "Raw results: [benchmarks.json](benchmarks.json). What metrics cost: "
                 "[metrics-benchmarks.md](metrics-benchmarks.md).")
    if results.quick:
        lines += ["", "**Quick mode**: tiny sizes and one repetition, a smoke run — "
                  "these figures are not benchmarks."]
    lines += ["", "## Targets", ""]
    lines += _table(["target", "measured", "met"],
                    [[t.goal, t.measured, "yes" if t.met else "**no**"]
                     for t in targets(results)])
    lines += ["", "## Machine and limits", ""]
    rows = [[k, v] for k, v in results.machine.items()]
    if results.limits is not None:
        lim = results.limits
        rows += [["disk sequential write (O_DIRECT + fsync)", f"{lim.disk_write_mb_s:,.0f} MB/s"],
                 ["disk sequential read (O_DIRECT)", f"{lim.disk_read_mb_s:,.0f} MB/s"],
                 ["page-cache read", f"{lim.page_cache_read_mb_s:,.0f} MB/s"],
                 ["loopback TCP, one stream (iperf3)",
                  "not measured (no iperf3)" if lim.loopback_mb_s is None
                  else f"{lim.loopback_mb_s:,.0f} MB/s"]]
    lines += _table(["", ""], rows)
    lines += ["", "## Systems", ""]
    lines += _table(["system", "version", "storage and acknowledgement", "load generator"],
                    [[_marked(results, name), info["version"], info["storage"],
                      info.get("load_generator", "")]
                     for name, info in results.systems.items()])
    relative = {title: os.path.relpath(path, out.parent) for title, path in plots.items()}
    for workload, title, intro in WORKLOADS:
        if not any(t.workload == workload for t in results.throughput):
            continue
        lines += ["", f"## {title}", "", intro, "",
                  f"Median of {_repetitions(results)} runs; ratios are records/s, "
                  "**bold** where gregor is behind.", ""]
        lines += _throughput_section(results, workload)
        if title in relative:
            lines += ["", f"![{title}]({relative[title]})"]
    if results.latency:
        lines += ["", "## End-to-end latency", ""] + _latency_section(results)
        if python := [lat.system for lat in results.latency
                      if lat.system in _python_clients(results)]:
            lines += ["", _python_note(python) + ": its latency includes the client's "
                      "own time per message."]
        if "End-to-end latency" in relative:
            lines += ["", f"![End-to-end latency]({relative['End-to-end latency']})"]
    if results.lookup:
        lines += ["", "## Offset lookup as the log grows (gregor)", ""]
        lines += _lookup_section(results)
        if "Offset lookup" in relative:
            lines += ["", f"![Offset lookup]({relative['Offset lookup']})"]
    sizes = " or ".join(f"{count:,} records of {size} B"
                        for size, count in results.records_per_run.items())
    lines += ["", "## How it is measured", "", METHOD.rstrip(),
              f"- **Run sizes**: {sizes} per produce run (NATS JetStream: a quarter "
              "of that, its Python client being about ten times slower)."]
    if results.notes:
        lines += ["", "## Notes from this run", ""] + [f"- {n}" for n in results.notes]
    if FINDINGS.exists():
        lines += ["", FINDINGS.read_text().rstrip()]
    return "\n".join(lines) + "\n"


def _repetitions(results: Results) -> int:
    return max((t.repetition + 1 for t in results.throughput), default=0)


def write_report(results: Results, out: Path) -> None:
    """Write the report, keeping the sections other benchmarks wrote into the old one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = write_plots(results, out.parent / "img")
    results.save(out.with_suffix(".json"))
    kept = kept_sections(out)
    out.write_text("\n".join([render(results, plots, out), *kept]))
