"""Debian's kcat (librdkafka 2.0.2, older than the Python wheel's) against a real broker.

An older librdkafka negotiates different versions and mis-skips non-empty tagged
fields, so it checks that every flexible response carries empty tag sections.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from clients import BASE_TIMESTAMP, TIMEOUT

from gregor.broker.process import BrokerProcess

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def _kcat(broker: BrokerProcess, *args: str, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(["kcat", "-b", broker.bootstrap, "-q", *args], input=stdin,
                            capture_output=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


def _consume_json(broker: BrokerProcess, topic: str, *args: str) -> list[dict]:
    out = _kcat(broker, "-C", "-t", topic, "-e", "-J", *args)
    return [json.loads(line) for line in out.decode().splitlines() if line]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, topic_name: str, compression: str) -> None:
    lines = [f"key{i}:value {i} " + "é" * (i % 4) for i in range(300)] + [":keyless-empty-key"]
    _kcat(broker, "-P", "-t", topic_name, "-p", "0", "-K", ":", "-z", compression,
          "-H", "origin=kcat", "-H", "n=1", stdin=("\n".join(lines) + "\n").encode())

    messages = _consume_json(broker, topic_name, "-o", "beginning")
    assert [m["offset"] for m in messages] == list(range(len(lines)))
    assert [(m["key"], m["payload"]) for m in messages] == [
        tuple(line.split(":", 1)) for line in lines]
    assert all(m["headers"] == ["origin", "kcat", "n", "1"] for m in messages)
    assert all(m["partition"] == 0 and m["tstype"] == "create" for m in messages)


def test_consume_from_offsets_and_timestamps(broker: BrokerProcess, topic_name: str) -> None:
    for batch in range(3):
        payload = "".join(f"b{batch}-{i}\n" for i in range(10)).encode()
        _kcat(broker, "-P", "-t", topic_name, "-p", "0", "-X", "linger.ms=100", stdin=payload)
    payloads = [m["payload"] for m in _consume_json(broker, topic_name, "-o", "beginning")]
    assert payloads == [f"b{b}-{i}" for b in range(3) for i in range(10)]

    from_offset = _consume_json(broker, topic_name, "-o", "13")  # mid-batch
    assert [m["offset"] for m in from_offset] == list(range(13, 30))
    last_two = _consume_json(broker, topic_name, "-o", "-2")
    assert [m["payload"] for m in last_two] == ["b2-8", "b2-9"]

    stamps = [m["ts"] for m in _consume_json(broker, topic_name, "-o", "beginning")]
    since = _consume_json(broker, topic_name, "-o", f"s@{stamps[20]}")
    assert since[0]["offset"] <= 20 and since[-1]["offset"] == 29


def test_timestamps_and_null_values(broker: BrokerProcess, topic_name: str) -> None:
    """kcat's -Z sends an empty line as a NULL value and prints NULL back."""
    _kcat(broker, "-P", "-t", topic_name, "-p", "0", "-Z", "-K", ":",
          stdin=b"k1:\nk2:v2\n")
    out = _kcat(broker, "-C", "-t", topic_name, "-e", "-Z", "-o", "beginning",
                "-f", "%k|%s|%S|%T\n").decode().splitlines()
    keys_values = [line.rsplit("|", 1)[0] for line in out]
    assert keys_values == ["k1|NULL|-1", "k2|v2|2"]
    assert all(int(line.rsplit("|", 1)[1]) > BASE_TIMESTAMP for line in out)


def test_query_offsets(broker: BrokerProcess, topic_name: str) -> None:
    _kcat(broker, "-P", "-t", topic_name, "-p", "0", stdin=b"a\nb\nc\n")
    out = _kcat(broker, "-Q", "-t", f"{topic_name}:0:-1").decode()
    assert f"{topic_name} [0] offset 3" in out
    out = _kcat(broker, "-Q", "-t", f"{topic_name}:0:-2").decode()
    assert f"{topic_name} [0] offset 0" in out
