"""A broker run inside the test's own event loop.

For the tests that must reach into a broker while clients talk to it: hold an fsync,
add a failing route, or wait for its last connection to end, which a broker in its own
process would not let them see.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from gregor.broker.broker import Broker
from gregor.config import BrokerConfig


@asynccontextmanager
async def in_process_broker(
    log_dir: Path,
    settings: Mapping[str, str] | None = None,
    before_start: Callable[[Broker], None] = lambda broker: None,
) -> AsyncIterator[Broker]:
    """A started broker with its data in ``log_dir`` on a free port of 127.0.0.1,
    stopped on the way out; ``before_start`` may change it (its routes) first."""
    broker = Broker(BrokerConfig.load(None, {"log.dirs": str(log_dir),
                                             "listeners": "PLAINTEXT://127.0.0.1:0",
                                             **(settings or {})}))
    before_start(broker)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def bootstrap_of(broker: Broker) -> str:
    host, port = broker.advertised_address
    return f"{host}:{port}"
