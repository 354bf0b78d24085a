"""Screenshots of every console page at a laptop's and a phone's width, for the README
and for people to look at: ``.venv/bin/python tests/console/screenshots.py docs/img``.

It starts its own broker (serving metrics) and console (reading them), fills them
with a little traffic (a producer that keeps writing, one group that keeps up and one
that fell behind), waits for the charts to have a past, then saves
``console-<page>.png`` and ``console-<page>-phone.png``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from console_harness import Console
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from gregor.broker.process import BrokerProcess

LAPTOP = (1366, 860)
PHONE = (390, 844)
HISTORY_S = 40  # seconds of traffic before the first screenshot: the charts' past
MAX_HEIGHT = 2200


def seed(console: Console, bootstrap: str, stop: threading.Event) -> list[threading.Thread]:
    for name, partitions, configs in (("orders", 3, {"retention.ms": "259200000"}),
                                      ("payments", 2, {}),
                                      ("customers", 1, {"cleanup.policy": "compact"})):
        console.api("POST", "/api/topics", {"name": name, "partitions": partitions,
                                            "configs": configs})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(40):
        producer.produce("customers", json.dumps({"id": i, "name": f"Customer {i}",
                                                  "tier": ["gold", "silver"][i % 2]}).encode(),
                         f"customer-{i}".encode())

    def write() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(12):
                order = {"order_id": 1000 + n, "customer": f"customer-{n % 40}",
                         "items": [{"sku": f"SKU-{n % 7}", "qty": 1 + n % 3}],
                         "total": round(9.5 + n % 50, 2)}
                headers = [("source", b"web-shop"), ("trace-id", f"{n:08x}".encode())]
                producer.produce("orders", json.dumps(order).encode(),
                                 f"order-{1000 + n}".encode(), headers=headers)
                if n % 3 == 0:
                    producer.produce("payments", json.dumps({"order_id": 1000 + n}).encode(),
                                     f"order-{1000 + n}".encode())
                n += 1
            producer.poll(0)
            stop.wait(0.5)
        producer.flush(10)

    def consume(group: str, per_poll: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "client.id": f"{group}-worker", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["orders"])
        while not stop.is_set():
            if consumer.consume(per_poll, 0.5):
                consumer.commit(asynchronous=False)
            stop.wait(0.5)
        consumer.close()

    # "analytics" read a while and stopped: an Empty group with lag to reset.
    behind = Consumer({"bootstrap.servers": bootstrap, "group.id": "analytics",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    threads = [threading.Thread(target=write), threading.Thread(target=consume,
                                                                args=("billing", 30))]
    for thread in threads:
        thread.start()
    behind.subscribe(["orders"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not behind.consume(50, 1):
        pass
    behind.commit(asynchronous=False)
    behind.close()
    return threads


def shoot(browser: webdriver.Chrome, size: tuple[int, int], path: Path) -> None:
    width, height = size
    browser.execute_script("window.scrollTo(0, 0)")
    page_height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": min(max(height, page_height), MAX_HEIGHT),
        "deviceScaleFactor": 1, "mobile": width < 600})
    browser.save_screenshot(str(path))
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "data",
                          overrides={"group.initial.rebalance.delay.ms": "0",
                                     "metrics.listener": "http://127.0.0.1:0/metrics"}) as broker:
        console = Console.start(broker.bootstrap, refresh_s=2, metrics=[str(broker.metrics_url)])
        threads = seed(console, broker.bootstrap, stop)
        options = webdriver.ChromeOptions()
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--hide-scrollbars", f"--window-size={LAPTOP[0]},{LAPTOP[1]}"):
            options.add_argument(argument)
        options.binary_location = shutil.which("chromium") or "chromium"
        browser = webdriver.Chrome(options=options,
                                   service=Service(shutil.which("chromedriver") or "chromedriver"))
        try:
            time.sleep(HISTORY_S)  # traffic for the charts, not a wait on the page
            wait = WebDriverWait(browser, 30)
            pages = {
                "cluster": ("", "[data-table=brokers]", None),
                "topics": ("topics", "[data-table=topics]", None),
                "topic": ("topics/orders", "[data-table=partitions]", None),
                "messages": ("topics/orders/messages", ".message-list .message", "messages"),
                "produce": ("topics/orders/produce", "[data-form=produce]", "produce"),
                "configs": ("topics/orders/configs", "[data-table=configs]", None),
                "groups": ("groups", "[data-table=groups]", None),
                "group": ("groups/billing", ".chart", None),
            }
            for size, suffix in ((LAPTOP, ""), (PHONE, "-phone")):
                browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": size[0], "height": size[1], "deviceScaleFactor": 1,
                    "mobile": size[0] < 600})
                for name, (route, ready, extra) in pages.items():
                    browser.get(console.page(route))
                    browser.refresh()  # a hash change alone keeps the old page's scroll
                    wait.until(lambda b, css=ready: b.find_elements(By.CSS_SELECTOR, css))
                    if extra == "messages":
                        browser.find_element(
                            By.CSS_SELECTOR, ".segmented input[value=json]").find_element(
                            By.XPATH, "..").click()
                        browser.find_element(By.CSS_SELECTOR, ".message-list .message-head").click()
                    if extra == "produce":
                        form = browser.find_element(By.CSS_SELECTOR, "[data-form=produce]")
                        form.find_element(By.NAME, "key").send_keys("order-2001")
                        form.find_element(By.NAME, "value").send_keys(
                            '{"order_id": 2001, "total": 42.5}')
                        form.find_element(By.CSS_SELECTOR, "[data-action=add-header]").click()
                        form.find_element(By.NAME, "header-name").send_keys("source")
                        form.find_element(By.NAME, "header-value").send_keys("console")
                        Select(form.find_element(By.NAME, "partition")).select_by_value("1")
                    shoot(browser, size, out / f"console-{name}{suffix}.png")
                    print(f"saved {out / f'console-{name}{suffix}.png'}", flush=True)
        finally:
            browser.quit()
            stop.set()
            for thread in threads:
                thread.join()
            console.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
