"""The ``gregor`` command line, run as users run it: a subprocess against a real broker.

What the commands write is checked with an independent real client (confluent-kafka)
where it matters, so a command that misreports its own work cannot pass.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clients import confluent_consume, confluent_consumer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from foreground import default_sigint

from gregor.broker.process import BrokerProcess

# An hour ago, whole seconds: a fixed date in 2023 lay beyond the default 7-day
# retention, so a retention check falling between a test's produce and consume
# deleted its records (the shared broker checks every 5 minutes).
TIMESTAMP = (int(time.time()) - 3600) * 1000
# Lines as ``produce -K '|'`` reads them: a space, a tab, bytes that are not UTF-8
# (including NUL), and an empty value.
LINES = b"k1|hello world\nk2|tab\there\n\xff|\xfe\x00bin\nk4|\n"
RECORDS = [(b"k1", b"hello world"), (b"k2", b"tab\there"), (b"\xff", b"\xfe\x00bin"), (b"k4", b"")]
HEADERS = [("app", b"gregor"), ("trace", b"a b")]
ALL_FOUR = ("--max-messages", "4", "--timeout", "20")  # the timeout only guards against a hang


def gregor(broker: BrokerProcess | None, *args: str, input: bytes | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m gregor.cli.main ARGS``, pointed at ``broker`` through GREGOR_BOOTSTRAP."""
    env = dict(os.environ)
    if broker is not None:
        env["GREGOR_BOOTSTRAP"] = broker.bootstrap
    return subprocess.run([sys.executable, "-m", "gregor.cli.main", *args], input=input,
                          capture_output=True, timeout=timeout, env=env)


def ok(broker: BrokerProcess | None, *args: str, input: bytes | None = None) -> str:
    result = gregor(broker, *args, input=input)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def fails(broker: BrokerProcess | None, *args: str, input: bytes | None = None) -> str:
    """The single ``gregor: error: ...`` line of a failing command (never a traceback)."""
    result = gregor(broker, *args, input=input)
    stderr = result.stderr.decode()
    assert result.returncode != 0, result.stdout.decode()
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gregor: error: "), stderr
    return lines[0]


def describe(broker: BrokerProcess, topic: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """``topics describe`` output as the topic line's fields and one dict per partition."""
    topic_line, *partition_lines = ok(broker, "topics", "describe", topic).splitlines()

    def fields(line: str) -> dict[str, str]:
        return {name: value for name, _, value in
                (field.partition(": ") for field in line.lstrip("\t").split("\t"))}

    return fields(topic_line), [fields(line) for line in partition_lines]


def produce_sample(broker: BrokerProcess, topic: str) -> None:
    ok(broker, "topics", "create", topic, "--partitions", "1")
    result = gregor(broker, "produce", topic, "--key-separator", "|", "--header", "app=gregor",
                    "--header", "trace=a b", "--timestamp", str(TIMESTAMP), input=LINES)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().strip() == f"Produced 4 records to topic {topic}."


# ------------------------------------------------------------------ topics
def test_topics_create_list_describe_alter_delete(broker: BrokerProcess, topic_name: str) -> None:
    out = ok(broker, "topics", "create", topic_name, "--partitions", "2",
             "--replication-factor", "1", "--config", "retention.ms=3600000",
             "--config", "segment.bytes=1048576")
    assert out == f"Created topic {topic_name}.\n"
    assert topic_name in ok(broker, "topics", "list").splitlines()

    topic, partitions = describe(broker, topic_name)
    assert topic["PartitionCount"] == "2" and topic["ReplicationFactor"] == "1"
    assert topic["Configs"] == "retention.ms=3600000,segment.bytes=1048576"
    assert [p["Partition"] for p in partitions] == ["0", "1"]
    for partition in partitions:
        assert partition["Leader"] != "-1" and partition["Isr"] == partition["Replicas"]
        assert partition["LogStartOffset"] == partition["LogEndOffset"] == "0"

    ok(broker, "topics", "alter", topic_name, "--partitions", "4",
       "--config", "cleanup.policy=compact", "--delete-config", "retention.ms")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 4
    resource = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].is_default
    topic, _ = describe(broker, topic_name)
    assert topic["Configs"] == "cleanup.policy=compact,segment.bytes=1048576"

    assert ok(broker, "topics", "delete", topic_name) == f"Deleted topic {topic_name}.\n"
    assert topic_name not in ok(broker, "topics", "list").splitlines()
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_topics_create_twice_and_delete_missing(broker: BrokerProcess, topic_name: str) -> None:
    ok(broker, "topics", "create", topic_name)
    assert "already exists" in fails(broker, "topics", "create", topic_name)
    ok(broker, "topics", "create", topic_name, "--if-not-exists")
    ok(broker, "topics", "delete", topic_name)
    assert "unknown topic" in fails(broker, "topics", "delete", topic_name)
    ok(broker, "topics", "delete", topic_name, "--if-exists")


def test_describe_reports_log_offsets(broker: BrokerProcess, topic_name: str) -> None:
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    ok(broker, "produce", topic_name, "--partition", "1", input=b"a\nb\nc\n")
    _, partitions = describe(broker, topic_name)
    assert [(p["LogStartOffset"], p["LogEndOffset"]) for p in partitions] == [("0", "0"),
                                                                               ("0", "3")]


# ----------------------------------------------------------------- produce
def test_produce_writes_keys_headers_timestamps(broker: BrokerProcess, topic_name: str) -> None:
    produce_sample(broker, topic_name)
    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    messages = confluent_consume(consumer, 4)
    consumer.close()
    assert [(m.key(), m.value()) for m in messages] == RECORDS
    assert all(m.headers() == HEADERS and m.timestamp()[1] == TIMESTAMP for m in messages)


def test_produce_from_file_to_partition_compressed(broker: BrokerProcess, topic_name: str,
                                                   tmp_path: Path) -> None:
    ok(broker, "topics", "create", topic_name, "--partitions", "3")
    source = tmp_path / "lines.txt"
    source.write_bytes(b"".join(b"line-%d\r\n" % i for i in range(500)))
    ok(broker, "produce", topic_name, "--file", str(source), "--partition", "2",
       "--compression", "zstd", "--acks", "1")
    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic_name, 2, 0)])
    values = [m.value() for m in confluent_consume(consumer, 500)]
    consumer.close()
    assert values == [b"line-%d" % i for i in range(500)]


def test_produce_reports_lines_without_key_separator(broker: BrokerProcess,
                                                     topic_name: str) -> None:
    error = fails(broker, "produce", topic_name, "-K", ":", input=b"k:v\nno separator\n")
    assert "Produced 1 record" in error and "1 failed" in error and "key separator" in error


# ----------------------------------------------------------------- consume
def test_consume_text_with_every_field(broker: BrokerProcess, topic_name: str) -> None:
    produce_sample(broker, topic_name)
    result = gregor(broker, "consume", topic_name, "--from-beginning", *ALL_FOUR,
                    "--print-timestamp", "--print-partition", "--print-offset",
                    "--print-headers", "--print-key")
    assert result.returncode == 0, result.stderr.decode()
    prefix = f"CreateTime:{TIMESTAMP}\tPartition:0"
    headers = "app:gregor,trace:a b"
    assert result.stdout.decode().splitlines() == [
        f"{prefix}\tOffset:0\t{headers}\tk1\thello world",
        f"{prefix}\tOffset:1\t{headers}\tk2\ttab\there",
        f"{prefix}\tOffset:2\t{headers}\t\\xff\t\\xfe\x00bin",
        f"{prefix}\tOffset:3\t{headers}\tk4\t",
    ]
    assert result.stderr.decode().strip() == "Processed a total of 4 messages"


def test_consume_text_prints_values_only_by_default(broker: BrokerProcess,
                                                    topic_name: str) -> None:
    produce_sample(broker, topic_name)
    out = ok(broker, "consume", topic_name, "--from-beginning", "--max-messages", "2")
    assert out == "hello world\ntab\there\n"


def test_consume_json(broker: BrokerProcess, topic_name: str) -> None:
    produce_sample(broker, topic_name)
    out = ok(broker, "consume", topic_name, "--from-beginning", *ALL_FOUR,
             "--format", "json")
    records = [json.loads(line) for line in out.splitlines()]
    assert records[0] == {
        "topic": topic_name, "partition": 0, "offset": 0, "timestamp": TIMESTAMP,
        "timestamp_type": "CreateTime", "key": "k1", "value": "hello world",
        "headers": [{"key": "app", "value": "gregor"}, {"key": "trace", "value": "a b"}]}
    binary = records[2]
    assert binary["key_encoding"] == binary["value_encoding"] == "base64"
    assert base64.b64decode(binary["key"]) == b"\xff"
    assert base64.b64decode(binary["value"]) == b"\xfe\x00bin"
    assert [(r["key"], r["value"]) for r in records[::3]] == [("k1", "hello world"), ("k4", "")]
    assert "value_encoding" not in records[3]


def test_consume_kv(broker: BrokerProcess, topic_name: str) -> None:
    produce_sample(broker, topic_name)
    out = ok(broker, "consume", topic_name, "--from-beginning", *ALL_FOUR,
             "--format", "kv")
    common = f"topic={topic_name} partition=0"
    tail = f"timestamp={TIMESTAMP} timestamp_type=CreateTime"
    headers = 'header.app=gregor header.trace="a b"'
    assert out.splitlines() == [
        f'{common} offset=0 {tail} key=k1 value="hello world" {headers}',
        f'{common} offset=1 {tail} key=k2 value="tab\\there" {headers}',
        f'{common} offset=2 {tail} key="\\xff" value="\\xfe\\u0000bin" {headers}',
        f'{common} offset=3 {tail} key=k4 value="" {headers}',
    ]


def test_consume_raw(broker: BrokerProcess, topic_name: str) -> None:
    produce_sample(broker, topic_name)
    result = gregor(broker, "consume", topic_name, "--from-beginning", *ALL_FOUR,
                    "--format", "raw", "--quiet")
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout == b"hello world\ntab\there\n\xfe\x00bin\n\n"


def test_consume_from_offset_partition_and_tail(broker: BrokerProcess, topic_name: str) -> None:
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    for partition in (0, 1):
        lines = b"".join(b"p%d-%d\n" % (partition, i) for i in range(5))
        ok(broker, "produce", topic_name, "--partition", str(partition), input=lines)
    out = ok(broker, "consume", topic_name, "--partition", "1", "--offset", "3",
             "--max-messages", "2", "--print-offset")
    assert out.splitlines() == ["Offset:3\tp1-3", "Offset:4\tp1-4"]
    out = ok(broker, "consume", topic_name, "--offset=-1", "--max-messages", "2",
             "--print-partition")
    assert sorted(out.splitlines()) == ["Partition:0\tp0-4", "Partition:1\tp1-4"]
    out = ok(broker, "consume", topic_name, "--partition", "0", "--offset", "earliest",
             "--max-messages", "2")
    assert out.splitlines() == ["p0-0", "p0-1"]
    # From the end (the default) there is nothing to read: exits once idle for --timeout.
    assert ok(broker, "consume", topic_name, "--timeout", "1") == ""
    error = fails(broker, "consume", topic_name, "--partition", "0", "--offset", "99")
    assert "out of range" in error and "log end offset 5" in error
    assert "no partition 7" in fails(broker, "consume", topic_name, "--partition", "7")


def test_consume_ctrl_c_prints_what_it_read_and_exits_130(broker: BrokerProcess,
                                                          topic_name: str) -> None:
    ok(broker, "produce", topic_name, input=b"first\n")
    # Unbuffered, each record reaches the pipe as it is written: Ctrl-C can then arrive
    # between a record on the screen and its count, and must not leave it uncounted.
    env = {**os.environ, "GREGOR_BOOTSTRAP": broker.bootstrap, "PYTHONUNBUFFERED": "1"}
    follow = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "consume", topic_name, "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        preexec_fn=default_sigint)
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == b"first\n"  # following the topic now
        follow.send_signal(signal.SIGINT)
        rest, stderr = follow.communicate(timeout=30)
    finally:
        follow.kill()
    assert follow.returncode == 130
    assert rest == b"" and stderr.decode().splitlines() == ["Processed a total of 1 messages"]


# -------------------------------------------------------------------- perf
def test_perf_produce_then_consume(broker: BrokerProcess, topic_name: str) -> None:
    ok(broker, "topics", "create", topic_name, "--partitions", "2")
    out = ok(broker, "perf", "produce", "--topic", topic_name, "--num-records", "5000",
             "--record-size", "100", "--acks", "1", "--compression", "lz4")
    assert re.match(r"5000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
                    r"latency, [\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, "
                    r"[\d.]+ ms 99th, [\d.]+ ms 99.9th\.", out), out
    consumer = confluent_consumer(broker.bootstrap)
    ends = [consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10)[1]
            for p in (0, 1)]
    consumer.close()
    assert sum(ends) == 5000

    out = ok(broker, "perf", "consume", "--topic", topic_name, "--messages", "5000")
    assert re.match(r"5000 records received, [\d.]+ records/sec \([\d.]+ MB/sec\), 0.48 MB",
                    out), out
    assert re.search(r"^[1-9]\d* fetch requests", out, re.MULTILINE), out

    error = fails(broker, "perf", "consume", "--topic", topic_name, "--messages", "6000",
                  "--timeout", "1")
    assert "only 5000 of 6000 records arrived" in error


def test_perf_produce_throttles_and_reports_progress(broker: BrokerProcess,
                                                     topic_name: str) -> None:
    result = gregor(broker, "perf", "produce", "--topic", topic_name, "--num-records", "300",
                    "--record-size", "10", "--throughput", "200", "--reporting-interval", "0.4")
    assert result.returncode == 0, result.stderr.decode()
    progress = result.stderr.decode().splitlines()
    assert len(progress) >= 2
    assert all(re.match(r"\d+ records sent, [\d.]+ records/sec", line) for line in progress)


# ------------------------------------------------------------------ errors
def test_unreachable_broker_is_one_clear_line() -> None:
    with socket.socket() as bound:  # bound but never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{bound.getsockname()[1]}"
        for command in (["topics", "list"], ["consume", "t"], ["produce", "t"],
                        ["perf", "consume", "--topic", "t", "--messages", "1"]):
            error = fails(None, *command, "--bootstrap-server", address, input=b"x\n")
            assert f"cannot reach a broker at {address}" in error and "refused" in error


def test_unknown_topic(broker: BrokerProcess, topic_name: str) -> None:
    assert fails(broker, "consume", topic_name, "--timeout", "1") == (
        f"gregor: error: unknown topic {topic_name!r}")
    assert f"unknown topic {topic_name!r}" in fails(broker, "topics", "describe", topic_name)
    assert f"unknown topic {topic_name!r}" in fails(broker, "topics", "alter", topic_name,
                                                    "--partitions", "3")


def test_bad_configs(broker: BrokerProcess, topic_name: str) -> None:
    error = fails(broker, "topics", "create", topic_name, "--config", "retention.ms=soon")
    assert "retention.ms" in error
    assert topic_name not in ok(broker, "topics", "list").splitlines()
    assert "no.such.property" in fails(broker, "topics", "list", "-X", "no.such.property=1")
    assert "NAME=VALUE" in fails(broker, "topics", "list", "-X", "linger.ms")
    ok(broker, "topics", "create", topic_name)
    assert "retention.ms" in fails(broker, "topics", "alter", topic_name,
                                   "--config", "retention.ms=soon")
    assert "cannot add partitions" in fails(broker, "topics", "alter", topic_name,
                                            "--partitions", "1")
