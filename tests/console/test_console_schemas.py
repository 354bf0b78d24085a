"""The console with a schema registry: subjects, versions and their diff, and message
values written by confluent-kafka's AvroSerializer shown decoded into their fields, by
its API and in the browser."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from console_harness import Console
from selenium.webdriver import Chrome
from test_console_browser import all_css, css, until

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess


@pytest.fixture(scope="module")
def registry(console_broker: BrokerProcess) -> Iterator[RegistryProcess]:
    process = RegistryProcess(console_broker.bootstrap).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def schema_console(console: Console, console_broker: BrokerProcess,
                   registry: RegistryProcess) -> Iterator[Console]:
    """A console of its own, pointed at the registry (``console`` has built the front end)."""
    running = Console.start(console_broker.bootstrap, schema_registry=registry.url)
    yield running
    running.stop()


def order_schema(*extra: dict) -> str:
    return json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, *extra]})


def test_subjects_versions_and_diff(schema_console: Console, registry: RegistryProcess) -> None:
    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    client = SchemaRegistryClient({"url": registry.url})
    first = client.register_schema(subject, Schema(order_schema(), "AVRO"))
    second = client.register_schema(subject, Schema(order_schema(
        {"name": "note", "type": "string", "default": ""}), "AVRO"))
    status, listed = schema_console.api("GET", "/api/subjects")
    assert status == 200
    assert {"subject": subject, "version": 2, "id": second, "type": "AVRO"} in listed["subjects"]
    status, described = schema_console.api("GET", f"/api/subjects/{subject}")
    assert [(v["version"], v["id"]) for v in described["versions"]] == [(1, first), (2, second)]
    assert described["compatibility"] == "BACKWARD"
    status, diff = schema_console.api("GET", f"/api/subjects/{subject}/diff?from=1&to=2")
    added = [line for line in diff["diff"] if line.startswith("+ ")]
    assert any('"name": "note"' in line for line in added), diff
    assert schema_console.api("GET", "/api/subjects/nope")[0] == 404
    assert schema_console.api("GET", "/api/info")[1]["schema_registry"] == registry.url


def test_framed_values_are_decoded(schema_console: Console, console_broker: BrokerProcess,
                                   registry: RegistryProcess) -> None:
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": registry.url})
    serialize = AvroSerializer(client, order_schema())
    producer = Producer({"bootstrap.servers": console_broker.bootstrap})
    producer.produce(topic, value=serialize({"id": 7}, SerializationContext(
        topic, MessageField.VALUE)))
    producer.produce(topic, value=b"not framed")
    assert producer.flush(20) == 0
    status, found = schema_console.api("GET", f"/api/topics/{topic}/messages?start=beginning")
    assert status == 200
    by_offset = {m["offset"]: m for m in found["messages"]}
    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    assert (by_offset[0]["value_schema_id"], by_offset[0]["value_decoded"]) == \
        (schema_id, {"id": 7})
    assert "value_decoded" not in by_offset[1]


def test_pages_show_subjects_diff_and_decoded_values(
        browser: Chrome, schema_console: Console, console_broker: BrokerProcess,
        registry: RegistryProcess) -> None:
    topic = f"shown-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": registry.url})
    client.register_schema(subject, Schema(order_schema(), "AVRO"))
    serialize = AvroSerializer(client, order_schema(
        {"name": "note", "type": "string", "default": ""}))
    producer = Producer({"bootstrap.servers": console_broker.bootstrap})
    producer.produce(topic, value=serialize({"id": 42, "note": "gift"}, SerializationContext(
        topic, MessageField.VALUE)))
    assert producer.flush(20) == 0

    browser.get(schema_console.page("schemas"))
    until(browser, lambda: css(browser, f"tr[data-subject='{subject}'] a"), "the subject").click()
    until(browser, lambda: len(all_css(browser, "[data-table=versions] tbody tr")) == 2,
          "both versions")
    assert '"name": "note"' in css(browser, "[data-field=schema]").text
    added = until(browser, lambda: all_css(browser, "[data-field=diff] .added"), "the changes")
    assert any('"name": "note"' in line.text for line in added)

    browser.get(schema_console.page(f"topics/{topic}/messages"))
    decoded = until(browser, lambda: css(browser, "[data-offset='0'] [data-field=value-decoded]"),
                    "the decoded value")
    assert json.loads(decoded.text) == {"id": 42, "note": "gift"}
