"""The console in a real headless chromium against a real broker, as a user drives it:
forms filled and buttons clicked, and every check waits on what the page shows
(WebDriverWait on the DOM), never on a fixed sleep. What the page claims is checked
against the broker with another client (confluent-kafka)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from console_harness import Console, q
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from gregor.broker.process import BrokerProcess

# Every Kafka call of the console is bounded by 10 s; a page shows its answer well
# within this.
PAGE_TIMEOUT_S = 30


def until(browser: Chrome, condition: Callable[[], Any], what: str,
          timeout: float = PAGE_TIMEOUT_S) -> Any:
    """Wait for ``condition`` to return something true; stale or missing elements
    (the page re-rendering) count as not yet."""
    def check(_: Chrome) -> Any:
        try:
            return condition()
        except Exception:  # noqa: BLE001 - StaleElementReference, NoSuchElement, ...
            return False
    return WebDriverWait(browser, timeout).until(check, message=f"waiting for {what}")


def css(root: Chrome | WebElement, selector: str) -> WebElement:
    return root.find_element(By.CSS_SELECTOR, selector)


def all_css(root: Chrome | WebElement, selector: str) -> list[WebElement]:
    return root.find_elements(By.CSS_SELECTOR, selector)


def stat(browser: Chrome, name: str) -> str:
    return css(browser, f"[data-stat={name}] .stat-value").text


def fill(field: WebElement, text: str) -> None:
    field.clear()
    field.send_keys(text)


def shown_keys(browser: Chrome) -> list[str]:
    return [e.text for e in all_css(browser, ".message-list [data-field=key-preview]")]


@pytest.fixture(scope="module")
def bootstrap(console_broker: BrokerProcess) -> str:
    return console_broker.bootstrap


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture(scope="module")
def producer(bootstrap: str) -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": bootstrap})
    yield producer
    producer.flush(10)


def new_topic(console: Console, partitions: int) -> str:
    name = f"ui-{uuid.uuid4().hex[:8]}"
    status, answer = console.api("POST", "/api/topics", {"name": name, "partitions": partitions})
    assert status == 201, answer
    return name


def produce(producer: Producer, topic: str, records: list[tuple[str, str]], **extra: Any) -> None:
    for key, value in records:
        producer.produce(topic, value.encode(), key.encode(), **extra)
    assert producer.flush(10) == 0


def test_cluster_page_shows_the_broker(browser: Chrome, console: Console,
                                       console_broker: BrokerProcess) -> None:
    browser.get(console.page(""))
    row = until(browser, lambda: css(browser, "[data-table=brokers] tbody tr"), "the brokers")
    assert f"127.0.0.1:{console_broker.port}" in row.text and "controller" in row.text
    assert stat(browser, "brokers") == "1"
    assert "metrics" in css(browser, "[data-note=metrics]").text


def test_create_a_topic_through_the_form(browser: Chrome, console: Console,
                                         admin: AdminClient) -> None:
    name = f"ui-form-{uuid.uuid4().hex[:8]}"
    browser.get(console.page("topics"))
    until(browser, lambda: css(browser, "[data-action=new-topic]"), "the topics page").click()
    form = css(browser, "[data-form=create-topic]")
    fill(css(form, "input[name=name]"), name)
    fill(css(form, "input[name=partitions]"), "2")
    fill(css(form, "textarea[name=configs]"), "retention.ms=3600000")
    css(form, "button[type=submit]").click()
    until(browser, lambda: css(browser, f"tr[data-topic='{name}']"), "the new topic's row")
    topic = admin.list_topics(name, timeout=10).topics[name]
    assert topic.error is None and len(topic.partitions) == 2
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
    entries = next(iter(configs.values())).result(10)
    assert entries["retention.ms"].value == "3600000"
    row = css(browser, f"tr[data-topic='{name}']")
    assert "1 h" in row.text  # retention, as the list shows it


def test_produce_through_the_form_and_find_it_by_key(browser: Chrome, console: Console,
                                                    bootstrap: str, producer: Producer) -> None:
    topic = new_topic(console, 3)
    produce(producer, topic, [(f"other-{i}", f"v{i}") for i in range(6)])
    browser.get(console.page(f"topics/{q(topic)}/produce"))
    form = until(browser, lambda: css(browser, "[data-form=produce]"), "the produce form")
    fill(css(form, "input[name=key]"), "order-42")
    fill(css(form, "textarea[name=value]"), '{"id": 42, "items": ["a"]}')
    css(form, "[data-action=add-header]").click()
    fill(css(form, "input[name=header-name]"), "source")
    fill(css(form, "input[name=header-value]"), "console-test")
    css(form, "button[type=submit]").click()
    produced = until(browser, lambda: css(browser, "[data-produced]"), "the produce receipt")
    partition, offset = map(int, produced.get_attribute("data-produced").split(":"))

    # Another client reads what the form produced.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        assert (message.key(), message.value(), message.headers()) == \
            (b"order-42", b'{"id": 42, "items": ["a"]}', [("source", b"console-test")])
    finally:
        consumer.close()

    # The browser finds it by key, from the beginning of every partition.
    css(browser, "nav.tabs a[href$='/messages']").click()
    until(browser, lambda: len(shown_keys(browser)) == 7, "the newest messages, shown on opening")
    Select(css(browser, "select[name=start]")).select_by_value("beginning")
    fill(css(browser, "input[name=key]"), "ORDER-4")
    css(browser, "[data-action=search]").click()
    until(browser, lambda: shown_keys(browser) == ["order-42"], "only the message with that key")
    card = css(browser, ".message-list .message")
    assert (card.get_attribute("data-partition"), card.get_attribute("data-offset")) == \
        (str(partition), str(offset))

    # Its value as JSON (compact in the closed card, pretty when open), its header,
    # then as hex.
    css(browser, ".segmented input[value=json]").find_element(By.XPATH, "..").click()
    assert css(card, "[data-field=value]").text == '{"id": 42, "items": ["a"]}'
    css(card, ".message-head").click()
    until(browser, lambda: css(card, "[data-field=value]").text.startswith('{\n  "id": 42'),
          "the value pretty-printed")
    headers = until(browser, lambda: css(card, "dl.headers"), "the headers")
    assert "source" in headers.text and "console-test" in headers.text
    css(browser, ".segmented input[value=hex]").find_element(By.XPATH, "..").click()
    until(browser, lambda: css(card, "[data-field=value]").text.startswith(
        "00000000  7b 22 69 64 22 3a 20 34 32"), "the value in hex")


def test_find_messages_by_timestamp(browser: Chrome, console: Console,
                                    producer: Producer) -> None:
    topic = new_topic(console, 1)
    base = int(datetime.datetime(2025, 3, 1, 9, 0, 0).timestamp() * 1000)  # local time
    for i in range(3):
        produce(producer, topic, [(f"at-{i}", f"minute {i}")], timestamp=base + i * 60_000)
    browser.get(console.page(f"topics/{q(topic)}/messages"))
    until(browser, lambda: len(shown_keys(browser)) == 3, "the newest messages")
    Select(css(browser, "select[name=start]")).select_by_value("timestamp")
    fill(css(browser, "input[name=at]"), "2025-03-01 09:01:00")
    css(browser, "[data-action=search]").click()
    until(browser, lambda: shown_keys(browser) == ["at-1", "at-2"],
          "the messages from that minute on")
    first = css(browser, ".message-list [data-field=timestamp]")
    assert first.text == "2025-03-01 09:01:00.000"


def test_load_more_appends_the_next_records(browser: Chrome, console: Console,
                                            producer: Producer) -> None:
    topic = new_topic(console, 1)
    keys = [f"r{i:02}" for i in range(50)]
    produce(producer, topic, [(key, "v") for key in keys])
    browser.get(console.page(f"topics/{q(topic)}/messages"))
    until(browser, lambda: len(shown_keys(browser)) == 50, "the newest messages")
    Select(css(browser, "select[name=start]")).select_by_value("beginning")
    Select(css(browser, "select[name=limit]")).select_by_visible_text("20")
    css(browser, "[data-action=search]").click()
    until(browser, lambda: shown_keys(browser) == keys[:20], "the first 20, oldest first")
    for shown in (40, 50):
        css(browser, "[data-action=more]").click()
        until(browser, lambda n=shown: shown_keys(browser) == keys[:n], f"the first {shown}")
    assert css(browser, "[data-scan]").get_attribute("data-scan") == "complete"


def test_live_tail_receives_a_record_from_another_client(browser: Chrome, console: Console,
                                                         producer: Producer) -> None:
    topic = new_topic(console, 2)
    produce(producer, topic, [("before", "old")])
    browser.get(console.page(f"topics/{q(topic)}/messages"))
    until(browser, lambda: shown_keys(browser) == ["before"], "the existing message")
    css(browser, "[data-action=follow]").click()
    until(browser, lambda: css(browser, "[data-follow=ready]"), "the live tail to start")
    assert shown_keys(browser) == []
    produce(producer, topic, [("live-1", "new"), ("live-2", "newer")])
    until(browser, lambda: sorted(shown_keys(browser)) == ["live-1", "live-2"],
          "the records produced meanwhile")
    css(browser, "[data-action=stop-follow]").click()
    until(browser, lambda: css(browser, "[data-follow=stopped]"), "the tail to stop")


def test_edit_configs_add_partitions_delete_topic(browser: Chrome, console: Console,
                                                  admin: AdminClient) -> None:
    topic = new_topic(console, 1)
    browser.get(console.page(f"topics/{q(topic)}/configs"))
    field = until(browser, lambda: css(browser, "tr[data-config='retention.ms'] input"),
                  "the configs")
    fill(field, "7200000")
    css(browser, "[data-action=save-configs]").click()
    until(browser, lambda: "topic" in css(browser, "tr[data-config='retention.ms']").text,
          "retention.ms shown as the topic's own")
    entries = next(iter(admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic)]).values())).result(10)
    assert entries["retention.ms"].value == "7200000"

    css(browser, "nav.tabs a[href$='/partitions']").click()
    fill(until(browser, lambda: css(browser, "input[name=count]"), "the partitions tab"), "3")
    css(browser, "[data-form=add-partitions] button[type=submit]").click()
    until(browser, lambda: len(all_css(browser, "[data-table=partitions] tbody tr")) == 3,
          "three partitions listed")
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    css(browser, "[data-action=delete-topic]").click()
    css(browser, "[data-action=delete-topic-confirm]").click()
    until(browser, lambda: "Deleted topic" in css(browser, ".notice").text, "the deletion")
    assert topic not in admin.list_topics(timeout=10).topics


def test_no_page_scrolls_sideways_on_a_phone(browser: Chrome, console: Console,
                                             producer: Producer) -> None:
    """At a phone's width (390 CSS px) wide tables scroll inside their box; the page
    itself never does."""
    topic = new_topic(console, 2)
    produce(producer, topic, [("a-rather-long-key-" * 3, '{"long": "' + "x" * 300 + '"}')])
    # Not "mobile": a mobile viewport grows to fit what overflows, which hides it.
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False})
    try:
        for route, ready in (("", "[data-table=brokers]"), ("topics", "[data-table=topics]"),
                             (f"topics/{q(topic)}", "[data-table=partitions]"),
                             (f"topics/{q(topic)}/messages", ".message-list .message"),
                             (f"topics/{q(topic)}/produce", "[data-form=produce]"),
                             (f"topics/{q(topic)}/configs", "[data-table=configs]"),
                             ("groups", "[data-table=groups]")):
            browser.get(console.page(route))
            until(browser, lambda css_=ready: css(browser, css_), f"#/{route}")
            width = browser.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"#/{route} is {width[0]} px wide on a 390 px screen"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def committed(admin: AdminClient, group: str) -> dict[int, int]:
    answer = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


def lag_history(console: Console, group: str, topic: str) -> list[int]:
    """The lags of partition 0 the console sampled for its chart, oldest first."""
    _, view = console.api("GET", f"/api/group?id={q(group)}")
    return [lag for lag in view["history"]["series"].get(f"{topic}-0", []) if lag is not None]


def consume_and_commit(consumer: Consumer, count: int) -> None:
    got = 0
    deadline = time.monotonic() + 30
    while got < count:
        assert time.monotonic() < deadline, f"consumed {got} of {count}"
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)


def test_group_lag_reset_and_refusals(browser: Chrome, console: Console, bootstrap: str,
                                      admin: AdminClient, producer: Producer) -> None:
    topic = new_topic(console, 1)
    group = f"ui-group-{uuid.uuid4().hex[:8]}"
    produce(producer, topic, [(f"k{i}", f"v{i}") for i in range(20)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "max.poll.interval.ms": 300_000})
    try:
        consumer.subscribe([topic])
        consume_and_commit(consumer, 5)
        browser.get(console.page(f"groups/{q(group)}"))
        until(browser, lambda: stat(browser, "lag") == "15", "a lag of 15")
        assert stat(browser, "state") == "Stable" and stat(browser, "members") == "1"
        until(browser, lambda: lag_history(console, group, topic)[-1:] == [15],
              "the sampler to see the lag of 15")

        consume_and_commit(consumer, 15)
        until(browser, lambda: stat(browser, "lag") == "0", "the lag falling to 0")
        # The chart draws the fall from the samples of 15 and then 0.
        until(browser, lambda: lag_history(console, group, topic)[-1:] == [0],
              "the sampler to see the lag of 0")
        until(browser, lambda: int(css(browser, ".chart").get_attribute("data-points")) >= 2,
              "the lag chart")

        # Refused while the consumer is a member, in words, where it was asked.
        css(browser, "[data-action=delete-group]").click()
        css(browser, "[data-action=delete-group-confirm]").click()
        until(browser, lambda: "has active members" in css(browser, ".danger-zone .error").text,
              "the deletion refused")
        css(browser, "[data-action=dry-run]").click()
        until(browser, lambda: "inactive" in css(browser, "[data-form=reset] .error").text,
              "the reset refused")
    finally:
        consumer.close()

    until(browser, lambda: stat(browser, "state") == "Empty", "the group empty")
    css(browser, "[data-action=dry-run]").click()  # to earliest, the default
    until(browser, lambda: css(browser, "[data-reset=dry-run] [data-field=new-offset]").text
          == "0", "the dry run's offsets")
    assert committed(admin, group) == {0: 20}
    css(browser, "[data-action=reset]").click()
    until(browser, lambda: css(browser, "[data-reset=executed]"), "the reset")
    assert committed(admin, group) == {0: 0}
    until(browser, lambda: stat(browser, "lag") == "20", "the lag after the reset")


def test_a_live_tail_survives_a_broker_restart(browser: Chrome, console: Console,
                                               console_broker: BrokerProcess,
                                               producer: Producer) -> None:
    topic = new_topic(console, 1)
    browser.get(console.page(f"topics/{q(topic)}/messages"))
    until(browser, lambda: css(browser, "[data-scan]"), "the (empty) topic")
    css(browser, "[data-action=follow]").click()
    until(browser, lambda: css(browser, "[data-follow=ready]"), "the live tail")
    console_broker.stop()
    try:
        until(browser, lambda: "cannot reach a broker" in css(
            browser, ".follow-status .error").text, "the tail's outage notice")
    finally:
        console_broker.start()
    until(browser, lambda: not all_css(browser, ".follow-status .error"), "the outage over")
    produce(producer, topic, [("after-restart", "v")])
    until(browser, lambda: shown_keys(browser) == ["after-restart"], "the record after it")
    css(browser, "[data-action=stop-follow]").click()


def test_a_stopped_broker_shows_an_error_and_nothing_hangs(
        browser: Chrome, console: Console, console_broker: BrokerProcess,
        producer: Producer) -> None:
    topic = new_topic(console, 1)
    produce(producer, topic, [("k", "v")])
    browser.get(console.page(f"topics/{q(topic)}/messages"))
    until(browser, lambda: shown_keys(browser) == ["k"], "the message")
    console_broker.stop()
    try:
        # Every page and action says so in words, in bounded time.
        css(browser, "[data-action=search]").click()
        until(browser, lambda: "cannot reach a broker" in css(browser, ".messages .error").text,
              "the browse's error")
        for route in ("", "topics", "groups", f"topics/{q(topic)}"):
            browser.get(console.page(route))
            until(browser, lambda: "cannot reach a broker" in css(browser, ".page .error").text,
                  f"the error on #/{route}")
            assert not all_css(browser, ".loading")
        browser.get(console.page("topics"))
        until(browser, lambda: css(browser, "[data-action=new-topic]"), "the topics page").click()
        fill(css(browser, "[data-form=create-topic] input[name=name]"), "while-down")
        css(browser, "[data-form=create-topic] button[type=submit]").click()
        until(browser, lambda: "cannot reach a broker" in css(
            browser, "[data-form=create-topic] .error").text, "the creation's error")
    finally:
        console_broker.start()
    browser.get(console.page(""))
    until(browser, lambda: stat(browser, "brokers") == "1", "the cluster back")
