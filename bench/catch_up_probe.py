"""A quick A/B of a follower's catch-up rate: the bulk replication path alone.

``bench.cluster_bench``'s catch-up section (one partition, 1 GiB) and
``bench.reassign_bench`` (10 GB under load) take minutes; comparing two versions of the
follower's fetch path needs many short runs alternated in the same window, because this
2-core machine is shared and its load moves the absolute rate by a factor of several
(the same build measured 25-255 MB/s within ten minutes at load averages 10-20). The
follower's CPU a megabyte and its kernel share move much less, and are what to compare
when the machine is busy.

Each run starts ZooKeeper and three brokers from one source tree (its ``src`` on
``PYTHONPATH``, so a second checkout of another commit is the other side of the
comparison), creates a topic whose partitions are all led by broker 1 with brokers 2
and 3 following, stops broker 3 with SIGSTOP, writes ``--mb`` of 1 KiB records at
acks=1, writes the dirty pages back, resumes broker 3 and times it until its logs hold
every byte the leader's do. Trees alternate, A B B A...; a tree may carry broker
configs, ``path+replica.fetch.max.bytes=8388608+num.replica.fetchers=2``. Every
directory it made is removed at the end.

    .venv/bin/python -m bench.catch_up_probe --trees .,/tmp/base --mb 512 --partitions 8
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from kafka.admin import KafkaAdminClient, NewTopic

from bench.cluster_bench import BATCH_BYTES, RECORD, Servers, bootstrap
from bench.cpu import cpu_seconds, kernel_seconds
from bench.run import settle
from bench.saturate import Job, Load
from gregor.broker.process import BrokerProcess

_CATCH_UP_LIMIT_S = 120


def log_bytes(broker: BrokerProcess, topic: str, partitions: int) -> int:
    return sum(path.stat().st_size for index in range(partitions)
               for path in (broker.data_dir / f"{topic}-{index}").glob("*.log"))


def create_led_by_first(brokers: list[BrokerProcess], topic: str, partitions: int) -> None:
    """Every partition led by the first broker (the first replica is the preferred leader),
    so the stopped follower leads nothing the load writes to."""
    ids = [broker.broker_id for broker in brokers]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(brokers))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:  # the controller learns of the last broker a moment after it serves
                admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={
                    index: ids for index in range(partitions)})])
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        admin.close()
    time.sleep(2)  # every follower has learnt its partitions


def catch_up(load: Load, servers: Servers, tree: str, megabytes: int, partitions: int,
             topic: str) -> tuple[float, float, float]:
    """MB/s, follower CPU ms a MB and its kernel share for one run from ``tree``."""
    root, *settings = tree.split("+")
    overrides = dict(setting.split("=", 1) for setting in settings)
    os.environ["PYTHONPATH"] = str(Path(root).resolve() / "src")
    brokers = servers.cluster(3, **overrides)
    try:
        leader, follower = brokers[0], brokers[-1]
        create_led_by_first(brokers, topic, partitions)
        assert follower.proc is not None
        follower.proc.send_signal(signal.SIGSTOP)
        try:
            requests = megabytes * 1024 * 1024 // BATCH_BYTES // 2  # two workers
            load.complete(Job("produce", leader.bootstrap, topic, partitions, RECORD,
                              requests=requests, batch_bytes=BATCH_BYTES))
            target = log_bytes(leader, topic, partitions)
            missing = target - log_bytes(follower, topic, partitions)
            settle()
            cpu = cpu_seconds([follower.proc.pid], descendants=False)
            kernel = kernel_seconds(follower.proc.pid)
        finally:
            follower.proc.send_signal(signal.SIGCONT)
        started = time.perf_counter()
        while log_bytes(follower, topic, partitions) < target:
            if time.perf_counter() - started > _CATCH_UP_LIMIT_S:
                raise AssertionError(
                    f"the follower holds {log_bytes(follower, topic, partitions)} of {target} "
                    f"bytes after {_CATCH_UP_LIMIT_S} s; its log ends:\n"
                    + "\n".join(follower.log_path.read_text().splitlines()[-40:]))
            time.sleep(0.005)
        wall = time.perf_counter() - started
        cpu = cpu_seconds([follower.proc.pid], descendants=False) - cpu
        kernel = kernel_seconds(follower.proc.pid) - kernel
        return missing / wall / 1e6, cpu * 1000 / (missing / 1e6), kernel / cpu if cpu else 0.0
    finally:
        servers.discard(brokers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=".",
                        help="comma-separated source trees, each optionally +key=value...")
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = args.trees.split(",")
    work = Path(tempfile.mkdtemp(prefix="gregor-catch-up-"))
    servers = Servers(work)
    load = Load()
    try:
        for round_ in range(args.rounds):
            # A, B, then B, A: whichever runs first after a cluster's logs were deleted
            # writes into pages freed moments before, much cheaper on this VM than
            # pages it never had (see the follower's kernel share).
            order = list(enumerate(trees))
            for number, tree in order if round_ % 2 == 0 else order[::-1]:
                rate, ms, kernel = catch_up(load, servers, tree, args.mb, args.partitions,
                                            f"c{round_}-{number}")
                print(f"{tree:40s} {args.partitions} partitions: {rate:6.0f} MB/s, "
                      f"follower {ms:.2f} ms CPU a MB ({kernel:.0%} in the kernel), "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        load.close()
        servers.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
