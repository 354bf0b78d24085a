"""The exactly-once loop of docs/examples/exactly_once.py, killed with SIGKILL twice
while input keeps arriving (so mid-transaction, or between two) and started again
each time: a read_committed reader of its output sees every result exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from group_clients import TIMEOUT, create_topic, wait_until

from gregor.broker.process import BrokerProcess

APP = Path(__file__).resolve().parent.parent / "docs" / "examples" / "exactly_once.py"
CHUNK = 50


class Output:
    """A read_committed reader of the app's output, gathering what it has read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
            "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.values: list[bytes] = []

    def count(self) -> int:
        for message in self.consumer.consume(1000, timeout=0.2):
            assert not message.error(), message.error()
            self.values.append(message.value())
        return len(self.values)


def test_killed_and_restarted_it_writes_each_result_once(broker: BrokerProcess,
                                                          topic_name: str) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 1)
    killed = threading.Event()
    fed: list[int] = []

    def feed() -> None:
        """A steady trickle of input until both kills are done, then ten chunks more."""
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        sent = 0
        remaining = 10
        while remaining:
            for _ in range(CHUNK):
                producer.produce(source, value=b"record-%d" % sent, partition=sent % 2)
                sent += 1
            assert producer.flush(TIMEOUT) == 0
            if killed.wait(0.2):  # paced, so the app is always busy with new input
                remaining -= 1
        fed.append(sent)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    args = [sys.executable, str(APP), broker.bootstrap, source, sink,
            f"g-{uuid.uuid4().hex[:8]}", f"eos-{uuid.uuid4().hex[:8]}"]
    output = Output(broker.bootstrap, sink)
    try:
        for _ in range(2):
            # Killed once it has committed something more: wherever it then is.
            app = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            before = output.count()
            try:
                wait_until(lambda app=app, before=before: (output.count() > before
                                                           or app.poll() is not None),
                           timeout=90, what="new results")
                assert app.poll() is None, app.stderr.read().decode() if app.stderr else ""
            finally:
                app.send_signal(signal.SIGKILL)
                app.wait()
        killed.set()
        feeder.join(TIMEOUT)
        (records,) = fed
        app = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: output.count() >= records, timeout=120, what="every result")
        finally:
            app.send_signal(signal.SIGKILL)
            app.wait()
        output.count()
        results = Counter(output.values)
        assert set(results) == {b"RECORD-%d" % i for i in range(records)}
        assert max(results.values()) == 1
    finally:
        killed.set()
        output.consumer.close()
        feeder.join(TIMEOUT)
