"""PNG plots of a run: throughput per system and workload, latency percentiles, lookups."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

from bench.results import Results  # noqa: E402
from bench.summary import cases, cell, systems  # noqa: E402

_COLOURS = ["#1f6feb", "#d29922", "#cf222e", "#2da44e", "#8250df"]


def _throughput(results: Results, workload: str, title: str, path: Path) -> None:
    shown = cases(results)
    names = systems(results, workload)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=False)
    for ax, unit in zip(axes, ("records_per_s", "mb_per_s"), strict=True):
        width = 0.8 / max(len(names), 1)
        for i, system in enumerate(names):
            values = []
            for case in shown:
                x = cell(results, system, workload, case)
                values.append(getattr(x, unit) / (1e3 if unit == "records_per_s" else 1)
                              if x else 0)
            positions = [k + (i - (len(names) - 1) / 2) * width for k in range(len(shown))]
            ax.bar(positions, values, width, label=system, color=_COLOURS[i % len(_COLOURS)])
        if unit == "mb_per_s" and results.limits is not None:
            if results.limits.loopback_mb_s is not None:
                ax.axhline(results.limits.loopback_mb_s / 2, color="grey", linestyle="--",
                           linewidth=1, label="50% of loopback TCP")
            if workload == "produce":
                ax.axhline(results.limits.disk_write_mb_s, color="black", linestyle=":",
                           linewidth=1, label="disk sequential write")
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels([c.label.replace(", ", "\n") for c in shown], fontsize=7)
        ax.set_ylabel("thousand records/s" if unit == "records_per_s" else "MB/s")
        ax.grid(axis="y", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{title} (median of repetitions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _latency(results: Results, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = ("p50", "p99", "p99.9")
    width = 0.8 / max(len(results.latency), 1)
    for i, lat in enumerate(results.latency):
        values = (lat.p50_ms, lat.p99_ms, lat.p999_ms)
        positions = [k + (i - (len(results.latency) - 1) / 2) * width for k in range(3)]
        ax.bar(positions, values, width, color=_COLOURS[i % len(_COLOURS)],
               label=f"{lat.system} at {lat.rate / 1e3:,.0f}k rec/s")
    ax.set_xticks(range(3))
    ax.set_xticklabels(labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title("End-to-end latency, 100 B records,\n"
                 "at half of each system's maximum rate (at most 50k records/s)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _lookup(results: Results, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    sizes = sorted({r.log_bytes for r in results.lookup})
    for i, position in enumerate(("start", "tail")):
        values = [next((r.p50_ms for r in results.lookup
                        if r.log_bytes == size and r.position == position), 0) for size in sizes]
        positions = [k + (i - 0.5) * 0.35 for k in range(len(sizes))]
        ax.bar(positions, values, 0.35, color=_COLOURS[i], label=f"fetch at the {position}")
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([f"{s / 1e9:g} GB log" if s >= 1e9 else f"{s / 1e6:g} MB log"
                        for s in sizes])
    ax.set_ylabel("p50 fetch round trip, ms (1 MiB answer)")
    ax.set_title("gregor: fetch latency as the log grows")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(results: Results, img_dir: Path) -> dict[str, Path]:
    """Write every plot there is data for; return them by title."""
    img_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for workload, title in (("produce", "Produce throughput"),
                            ("consume", "Consume throughput"),
                            ("fetch", "Consume throughput, bare Fetch requests")):
        if any(t.workload == workload for t in results.throughput):
            path = img_dir / f"bench-{workload}.png"
            _throughput(results, workload, title, path)
            written[title] = path
    if results.latency:
        path = img_dir / "bench-latency.png"
        _latency(results, path)
        written["End-to-end latency"] = path
    if results.lookup:
        path = img_dir / "bench-lookup.png"
        _lookup(results, path)
        written["Offset lookup"] = path
    return written
