"""One broker, one ``gregor console`` and one headless chromium for the console tests.

The console runs as users run it (``gregor console`` in its own process) against a
real broker; the browser is Debian's chromium driven by Selenium through Debian's
chromium-driver (scripts/install-chromium.sh), so nothing is downloaded at run time.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_harness import Console
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from gregor.broker.process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
LAPTOP = (1366, 900)


@pytest.fixture(scope="session")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The console tests' own broker: one of them stops it (and starts it again)."""
    data = tmp_path_factory.mktemp("console-broker") / "data"
    process = BrokerProcess(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def console(console_broker: BrokerProcess) -> Iterator[Console]:
    # Builds only when the front end's sources changed since the last build.
    subprocess.run([str(ROOT / "scripts" / "build-console.sh")], check=True)
    running = Console.start(console_broker.bootstrap)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("chromium and chromium-driver are not installed: "
                    "run scripts/install-chromium.sh")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size={LAPTOP[0]},{LAPTOP[1]}"):
        options.add_argument(argument)
    options.binary_location = chromium
    browser = webdriver.Chrome(options=options, service=Service(driver))
    yield browser
    browser.quit()
