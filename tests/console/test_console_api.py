"""The console's JSON API against a real broker: what the pages rely on, checked
without a browser (cheaper), and the answers a page shows when input is refused."""

from __future__ import annotations

import base64
import threading
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from console_harness import Console, q


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def filled(console: Console) -> str:
    """A topic of 3 partitions with 30 records, keys k0..k29, a header on every third."""
    name = f"api-{uuid.uuid4().hex[:8]}"
    status, answer = console.api("POST", "/api/topics", {"name": name, "partitions": 3})
    assert status == 201, answer
    for i in range(30):
        headers = [["trace", f"id-{i}"]] if i % 3 == 0 else []
        status, answer = console.api("POST", f"/api/topics/{name}/messages",
                                     {"key": f"k{i}", "value": f'{{"n": {i}}}',
                                      "partition": i % 3, "headers": headers})
        assert status == 201, answer
    return name


def test_topic_lists_partitions_offsets_and_configs(console: Console, filled: str) -> None:
    status, topic = console.api("GET", f"/api/topics/{filled}")
    assert status == 200
    assert [(p["partition"], p["log_start"], p["log_end"]) for p in topic["partitions"]] == \
        [(0, 0, 10), (1, 0, 10), (2, 0, 10)]
    assert all(p["leader"] == p["replicas"][0] and p["isr"] == p["replicas"]
               for p in topic["partitions"])
    assert topic["configs"]["cleanup.policy"]["value"] == "delete"
    _, listed = console.api("GET", "/api/topics")
    row = next(t for t in listed["topics"] if t["name"] == filled)
    assert (row["partitions"], row["records"], row["replication_factor"]) == (3, 30, 1)


def test_filters_on_key_value_and_header(console: Console, filled: str) -> None:
    base = f"/api/topics/{filled}/messages?start=beginning&limit=1000"
    _, by_key = console.api("GET", base + "&key=K17")  # case-insensitive
    assert [m["key"] for m in by_key["messages"]] == [b64("k17")]
    _, by_value = console.api("GET", base + "&value=" + q('"n": 2'))
    assert sorted(m["value"] for m in by_value["messages"]) == sorted(
        b64(f'{{"n": {i}}}') for i in (2, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29))
    _, by_header = console.api("GET", base + "&header=id-2")
    assert sorted(m["key"] for m in by_header["messages"]) == sorted(
        b64(k) for k in ("k21", "k24", "k27"))
    assert by_header["messages"][0]["headers"][0][0] == "trace"
    assert by_header["scanned"] == 30 and by_header["complete"]


def test_load_more_continues_where_a_browse_stopped(console: Console, filled: str) -> None:
    path = f"/api/topics/{filled}/messages?partition=1&start=offset&at=2&limit=3"
    _, first = console.api("GET", path)
    assert [m["offset"] for m in first["messages"]] == [2, 3, 4]
    assert first["next"] == {"1": 5} and not first["complete"]
    _, more = console.api("GET", path + "&resume=" + q("1:5"))
    assert [m["offset"] for m in more["messages"]] == [5, 6, 7]


def test_newest_and_time_starts(console: Console, filled: str) -> None:
    _, newest = console.api("GET", f"/api/topics/{filled}/messages?start=end&limit=2")
    assert [m["key"] for m in newest["messages"]] == [b64("k29"), b64("k28")]
    middle = next(m for m in console.api(
        "GET", f"/api/topics/{filled}/messages?start=beginning&key=k15")[1]["messages"])
    _, later = console.api(
        "GET", f"/api/topics/{filled}/messages?start=timestamp&at={middle['timestamp']}&limit=100")
    assert all(m["timestamp"] >= middle["timestamp"] for m in later["messages"])
    assert b64("k15") in [m["key"] for m in later["messages"]]
    assert b64("k14") not in [m["key"] for m in later["messages"]]


def test_follow_streams_records_produced_by_another_client(console: Console,
                                                           filled: str) -> None:
    events = console.events(f"/api/topics/{filled}/follow?key=live")
    kind, ready = next(events)
    assert kind == "ready" and ready["offsets"] == {"0": 10, "1": 10, "2": 10}
    producer = Producer({"bootstrap.servers": console_bootstrap(console)})
    producer.produce(filled, b"ignored", b"other")  # filtered out
    producer.produce(filled, b"hello", b"live-1", headers=[("h", b"v")])
    assert producer.flush(10) == 0
    kind, message = next(events)
    assert kind == "message"
    assert (message["key"], message["value"], message["headers"]) == \
        (b64("live-1"), b64("hello"), [["h", b64("v")]])


def console_bootstrap(console: Console) -> str:
    _, info = console.api("GET", "/api/info")
    return info["bootstrap"]


@pytest.mark.parametrize(("method", "path", "body", "status", "words"), [
    ("POST", "/api/topics", {"partitions": 1}, 400, "a topic needs a name"),
    ("POST", "/api/topics", {"name": "x", "partitions": "two"}, 400,
     "partitions must be a whole number"),
    ("GET", "/api/topics/no-such-topic", None, 404, "unknown topic 'no-such-topic'"),
    ("GET", "/api/topics/no-such-topic/messages", None, 502, "unknown topic 'no-such-topic'"),
    ("GET", "/api/group?id=no-such-group", None, 404, "'no-such-group' does not exist"),
    ("GET", "/api/group", None, 400, "which group?"),
    ("POST", "/api/group/reset?id=g", {"topics": ["t"], "to": "yesterday"}, 400,
     "to must be earliest, latest, timestamp, offset or shift"),
    ("GET", "/api/topics/t/messages?start=somewhere", None, 400, "start must be one of"),
    ("GET", "/api/topics/t/messages?resume=1-5", None, 400, "resume expects P:OFFSET"),
])
def test_refusals_are_in_words(console: Console, method: str, path: str, body: object,
                               status: int, words: str) -> None:
    answered, answer = console.api(method, path, body)
    assert answered == status
    assert words in answer["error"]


def test_cluster_refusals_reach_the_page(console: Console, filled: str) -> None:
    status, answer = console.api("POST", "/api/topics", {"name": filled})
    assert status == 502 and answer["error"] == \
        f"cannot create topic {filled!r}: topic {filled!r} already exists"
    status, answer = console.api("POST", f"/api/topics/{filled}/partitions", {"count": 2})
    assert status == 502 and "cannot add partitions" in answer["error"]
    status, answer = console.api("POST", f"/api/topics/{filled}/messages",
                                 {"value": "x", "partition": 7})
    assert status == 502 and "no partition 7" in answer["error"]


def test_requests_do_not_wait_on_each_other(console: Console, filled: str) -> None:
    """A live tail holds a worker thread; pages still answer meanwhile."""
    events = console.events(f"/api/topics/{filled}/follow")
    assert next(events)[0] == "ready"
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(console.api("GET", "/api/cluster")[0]))
    thread.start()
    thread.join(30)
    assert answers == [200]


def test_reset_offsets_to_an_offset_a_time_or_by_a_shift(console: Console, filled: str) -> None:
    """An inactive group's offsets: dry runs change nothing, an executed reset commits."""
    group = f"api-reset-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": console_bootstrap(console)})

    def committed() -> dict[int, int]:
        answer = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result(10)
        return {tp.partition: tp.offset for tp in answer.topic_partitions}

    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(filled, p, 8) for p in range(3)])])[group].result(10)
    path = f"/api/group/reset?id={q(group)}"

    def reset(to: str, value: int, execute: bool, topics: list[str] | None = None
              ) -> dict[int, int]:
        status, answer = console.api("POST", path, {"topics": topics or [filled], "to": to,
                                                     "value": value, "execute": execute})
        assert status == 200, answer
        assert answer["executed"] is execute
        return {row["partition"]: row["offset"] for row in answer["offsets"]}

    assert reset("offset", 3, False) == {0: 3, 1: 3, 2: 3}
    assert reset("shift", -2, False) == {0: 6, 1: 6, 2: 6}
    _, topic = console.api("GET", f"/api/topics/{filled}")
    ends = {p["partition"]: p["log_end"] for p in topic["partitions"]}
    assert reset("offset", 10**6, False) == ends  # kept inside the log
    _, k4 = console.api("GET", f"/api/topics/{filled}/messages?start=beginning&key=k4")
    # Each partition from its first record at or after k4's time: k4 is partition 1's 1.
    at = reset("timestamp", k4["messages"][0]["timestamp"], False)
    assert at[1] == 1
    assert committed() == {0: 8, 1: 8, 2: 8}
    assert reset("earliest", 0, True, [f"{filled}:0,2"]) == {0: 0, 2: 0}
    assert committed() == {0: 0, 1: 8, 2: 0}


def test_pages_elsewhere_cannot_drive_the_console(console: Console) -> None:
    """No login, so: bodies only as JSON (a cross-site form cannot send that without a
    CORS preflight) and, on a loopback address, only loopback host names (no DNS
    rebinding)."""
    def post(headers: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(console.url + "api/topics", method="POST",
                                         data=b'{"name": "forged"}', headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    assert post({"Content-Type": "text/plain"}) == (
        400, '{"error":"the request body must be JSON (Content-Type: application/json)"}')
    assert post({"Content-Type": "application/json", "Host": "attacker.example"}) == (
        400, "Invalid host header")
    _, listed = console.api("GET", "/api/topics")
    assert "forged" not in [t["name"] for t in listed["topics"]]
