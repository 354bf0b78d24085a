"""``python -m bench.profile``: where gregor's broker spends its CPU under one workload.

Starts a broker, attaches py-spy to it and drives the produce, consume
(librdkafka) or bare Fetch workload until the sampling ends, then prints the functions with the most
samples: by self time (the code actually running) and inclusive (the code and
everything it calls). Profiles guide optimisation better than guesses.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from bench.cpu import Stopwatch
from bench.peers.gregor import GregorPeer
from bench.records import RecordSet
from bench.txn_bench import produce_in_transactions


def _folded_totals(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """Self and inclusive sample counts per frame of a py-spy ``raw`` (folded) file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return own, inclusive, total


def _print_top(title: str, counts: Counter[str], total: int, limit: int) -> None:
    print(f"\n{title} ({total} samples)")
    for frame, count in counts.most_common(limit):
        print(f"{100 * count / total:6.1f}%  {frame}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("workload", choices=["produce", "consume", "fetch", "txn-produce"],
                        help="txn-produce: one transactional producer, transactions of "
                             "1,000 records (bench.txn_bench)")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--acks", default="1")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if shutil.which("py-spy") is None and not Path(sys.executable).with_name("py-spy").exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    workdir = Path(tempfile.mkdtemp(prefix="gregor-profile-"))
    peer = GregorPeer(workdir)
    try:
        peer.start()
        client = peer.client()
        records = RecordSet(args.size, args.records)
        topic = f"profile-{uuid.uuid4().hex[:8]}"
        client.create(topic, args.partitions)
        watch = Stopwatch(peer.server_pids)
        if args.workload not in ("produce", "txn-produce"):
            client.produce(topic, args.partitions, records, args.acks, watch)
        folded = workdir / "profile.txt"
        spy = subprocess.Popen([py_spy, "record", "--pid", str(peer.server_pids()[0]),
                                "--format", "raw", "--output", str(folded), "--rate", "250",
                                "--duration", str(args.seconds)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1)  # py-spy attaches
            runs = []
            while spy.poll() is None:
                if args.workload == "produce":
                    runs.append(client.produce(topic, args.partitions, records, args.acks, watch))
                elif args.workload == "txn-produce":
                    runs.append(produce_in_transactions(client.bootstrap, topic, records, watch,
                                                        partitions=args.partitions))
                elif args.workload == "consume":
                    runs.append(client.consume(topic, args.partitions, records, watch))
                else:
                    runs.append(client.consume_bare(topic, args.partitions, records, watch))
            spy.wait()
        finally:
            if spy.poll() is None:
                spy.kill()
        rate = sum(records.count for _ in runs) / sum(r.seconds for r in runs)
        print(f"{args.workload} {args.size} B x {args.partitions} partition(s), acks={args.acks}: "
              f"{len(runs)} runs, {rate:,.0f} records/s, server "
              f"{sum(r.server_cores for r in runs) / len(runs):.2f} cores, client "
              f"{sum(r.client_cores for r in runs) / len(runs):.2f} cores")
        own, inclusive, total = _folded_totals(folded)
        _print_top("self time", own, total, args.top)
        _print_top("inclusive time", inclusive, total, args.top)
    finally:
        peer.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
