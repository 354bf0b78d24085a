"""``scripts/run-cluster.sh``, then ``gregor console`` given nothing but a bootstrap
server, as the README has users run them, seen in headless Chromium: the cluster page
shows the three brokers, and bytes in and out per second from all three brokers' own
metrics, which the console found by itself (each broker's ``metrics.listener``, read
with DescribeConfigs) without ``--metrics``; the topics page shows the topic and its
size. librdkafka answers a DescribeConfigs of two brokers with _CONFLICT, so a console
that asked for all brokers in one call found no metrics on any cluster of more than one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from console_harness import Console
from run_cluster import WAIT_S, RunningCluster, running_cluster
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.timeout(240)

REFRESH_S = 0.5


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    yield from running_cluster(RunningCluster(tmp_path_factory.mktemp("run-cluster")))


def _shown(browser: Chrome, selector: str) -> str | None:
    """The text of the first element ``selector`` finds, or None (not rendered yet)."""
    found = browser.find_elements(By.CSS_SELECTOR, selector)
    return found[0].text if found else None


def test_run_cluster_then_console_shows_brokers_topics_and_bytes_in_and_out(
        browser: Chrome, console: Console, running: RunningCluster) -> None:
    # Depends on ``console`` for the front end it builds.
    running.wait_ready()
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": running.bootstrap})  # kept until the answer
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(WAIT_S)
    del admin  # not kept by a failure's traceback, calling the cluster once it is stopped
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 5})
        while not stop.is_set():
            producer.produce(topic, b"x" * 100)
            producer.poll(0.005)
        producer.flush(WAIT_S)

    def read() -> None:
        consumer = Consumer({"bootstrap.servers": running.bootstrap, "group.id": topic,
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        while not stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    load = [threading.Thread(target=write, name="write"), threading.Thread(target=read,
                                                                            name="read")]
    for thread in load:
        thread.start()
    # The README's command: one broker's address, no --metrics.
    found = Console.start(running.bootstrap.split(",")[0], REFRESH_S)
    try:
        browser.get(found.page(""))
        WebDriverWait(browser, WAIT_S).until(
            lambda b: _shown(b, "[data-stat=brokers] .stat-value") == "3"
            and _shown(b, "[data-stat=bytes-in] .stat-value") not in (None, "–", "0 B/s")
            and _shown(b, "[data-stat=bytes-out] .stat-value") not in (None, "–", "0 B/s"),
            message="3 brokers, and bytes in and out, on the cluster page")
        assert "3 of 3 brokers" in str(_shown(browser, "[data-note=metrics]"))
        brokers = str(_shown(browser, "[data-table=brokers] tbody"))
        for address in running.bootstrap.split(","):
            assert address in brokers
        browser.get(found.page("topics"))
        row = f"tr[data-topic='{topic}'] td[data-size]"
        WebDriverWait(browser, WAIT_S).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, row) and int(
                b.find_element(By.CSS_SELECTOR, row).get_attribute("data-size") or 0) > 0,
            message=f"{topic} and its size on the topics page")
    finally:
        stop.set()
        for thread in load:
            thread.join()
        found.stop()


def _reassign(running: RunningCluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gregor.cli.main", "cluster", "reassign",
                           *args], capture_output=True, timeout=WAIT_S,
                          env={**os.environ, "GREGOR_BOOTSTRAP": running.bootstrap})
    return done.stdout.decode()


def test_console_shows_a_reassignment_in_progress(
        browser: Chrome, console: Console, running: RunningCluster, tmp_path: Path) -> None:
    """A throttled move onto another broker: the cluster page lists it with the replicas
    added and bytes moved and left, as ``gregor cluster add-broker`` prints them."""
    running.wait_ready()
    topic = f"mv-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(WAIT_S)
    del admin
    producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 5})
    for _ in range(4000):
        producer.produce(topic, b"x" * 1000)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    plan, back = tmp_path / "plan.json", tmp_path / "back.json"
    for path, replicas in ((plan, [2]), (back, [1])):
        path.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": replicas}]}))
    out = _reassign(running, "--execute", "--reassignment-json-file", str(plan),
                    "--throttle", "200000")
    assert "Successfully started partition reassignment(s)" in out, out
    found = Console.start(running.bootstrap.split(",")[0], REFRESH_S)
    try:
        browser.get(found.page(""))
        table = "[data-table=reassignments] tbody"
        WebDriverWait(browser, WAIT_S).until(
            lambda b: topic in str(_shown(b, table)), message="the move on the cluster page")
        (row,) = browser.find_elements(By.CSS_SELECTOR, f"{table} tr")
        cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "td")]
        assert cells[:5] == [topic, "0", "2, 1", "2", "1"]
        assert cells[6] not in ("0 B", "–")  # bytes left while it is throttled
    finally:
        found.stop()
        _reassign(running, "--cancel", "--reassignment-json-file", str(plan))
        # Back where it was: --verify of the original plan clears the throttles.
        _reassign(running, "--verify", "--reassignment-json-file", str(back))
