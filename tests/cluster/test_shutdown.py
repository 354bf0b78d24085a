"""A SIGTERM'd broker exits within its documented bound (gregor.broker.shutdown), closing
its logs cleanly, whatever ZooKeeper, the controller or the other brokers do.

One cluster of three brokers with a topic of 1,000 partitions at RF=3 (the size at which
brokers stopped together as ZooKeeper went away ran forever: kazoo's wake-up socket pair
filled and blocked the event loop) serves every test here; it has a ZooKeeper of its own,
since one test stops it. Controlled-shutdown attempts are short (3 s, 0.5 s apart) to
keep the bound, and so the tests, short.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from clients import METADATA_VERSION, WireConnection, metadata_request
from confluent_kafka.admin import NewTopic
from harness import Cluster

from gregor.broker.process import BrokerProcess
from gregor.broker.shutdown import shutdown_bound_s
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.config import BrokerConfig
from gregor.protocol.api_keys import ApiKey
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE

PARTITIONS = 1000
TOPIC = "big"
SETTINGS = {"request.timeout.ms": "3000", "controlled.shutdown.retry.backoff.ms": "500"}
# Long enough for the controller's retries to make hundreds of calls to a ZooKeeper
# that is gone.
ZOOKEEPER_GONE_S = 5.0
# At once: the time a process takes to act on a signal, on a busy machine.
AT_ONCE_S = 3.0


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("shutdown")
    with ZooKeeperServer(work / "zookeeper", force_sync=False) as zookeeper:
        cluster = Cluster(zookeeper, work, **SETTINGS).start()
        try:
            admin = cluster.admin()
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(timeout=60)
            cluster.wait_for(lambda m: TOPIC in m.topics
                             and len(m.topics[TOPIC].partitions) == PARTITIONS
                             and all(p.leader > 0 for p in m.topics[TOPIC].partitions.values()),
                             "every partition to be led", timeout=300)
            yield cluster
        finally:
            cluster.stop()


def bound_s(broker: BrokerProcess) -> float:
    return shutdown_bound_s(BrokerConfig.load(None, broker.overrides))


def restart_stopped(cluster: Cluster) -> None:
    """Start again whatever an earlier test stopped (ZooKeeper too), and wait until all
    are registered."""
    if cluster.zookeeper.pid is None:
        cluster.zookeeper.start()
    for broker in cluster.brokers.values():
        if broker.proc is None or broker.proc.poll() is not None:
            broker.proc = None
            broker.start(timeout=300)
    cluster.wait_everywhere(lambda m: len(m.brokers) == len(cluster.brokers)
                            and m.controller_id > 0, "every broker back", timeout=120)


def wait_exit(brokers: list[BrokerProcess], within_s: float) -> dict[int, tuple[int, float]]:
    """Each broker's exit status and seconds to exit from now, failing past ``within_s``
    (the processes still running are left to the fixture, which kills them)."""
    start = time.monotonic()
    exits: dict[int, tuple[int, float]] = {}
    while len(exits) < len(brokers):
        for broker in brokers:
            assert broker.proc is not None and broker.broker_id is not None
            code = broker.proc.poll()
            if code is not None and broker.broker_id not in exits:
                exits[broker.broker_id] = (code, time.monotonic() - start)
        running = [b.broker_id for b in brokers if b.broker_id not in exits]
        assert time.monotonic() - start < within_s, (
            f"brokers {running} still running {within_s:.0f} s after SIGTERM:\n"
            + "\n".join(b.log_tail(8) for b in brokers if b.broker_id in running))
        time.sleep(0.05)
    return exits


def clean(broker: BrokerProcess) -> bool:
    return (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()


def test_a_broker_stops_cleanly_with_the_controller_gone(big: Cluster) -> None:
    """The controller killed, another broker SIGTERM'd at once: its controlled shutdown
    waits for a new controller (after the old one's session expires) or gives up, and it
    exits cleanly in time either way. A second SIGTERM ends the third at once."""
    restart_stopped(big)
    controller_id = big.metadata().controller_id
    controller = big.brokers[controller_id]
    stopping, last = (b for i, b in big.brokers.items() if i != controller_id)
    controller.kill()
    assert stopping.proc is not None
    stopping.proc.send_signal(signal.SIGTERM)
    ((code, _),) = wait_exit([stopping], bound_s(stopping)).values()
    assert code == 0 and clean(stopping), stopping.log_tail()

    assert last.proc is not None
    # ZooKeeper paused holds the last broker's shutdown (its znodes, its session's close)
    # so that the second SIGTERM lands while it stops: running, the last broker of a
    # cluster stopped cleanly 0.14 s after the first, before the second came (the whole
    # suite at 13:35 UTC, load 6; it then died of the second signal, exit -15).
    big.zookeeper.pause()
    try:
        last.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        last.proc.send_signal(signal.SIGTERM)
        ((code, _),) = wait_exit([last], AT_ONCE_S).values()
    finally:
        big.zookeeper.resume()
    assert code == 128 + signal.SIGTERM and not clean(last), last.log_tail()


def test_brokers_stopped_together_as_zookeeper_goes_exit_cleanly(big: Cluster) -> None:
    """The issue's sequence: SIGTERM to every broker, ZooKeeper killed a tenth of a
    second later. Each exits within its bound, its logs closed with the clean-shutdown
    marker (its controlled shutdown gives up or finds nothing it could move)."""
    restart_stopped(big)
    brokers = list(big.brokers.values())
    for broker in brokers:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    big.zookeeper.kill()
    exits = wait_exit(brokers, max(bound_s(b) for b in brokers))
    assert all(code == 0 for code, _ in exits.values()), exits
    assert all(clean(b) for b in brokers), [b.log_tail() for b in brokers]


def test_the_bound_follows_kafkas_controlled_shutdown_settings() -> None:
    """Attempts times the request timeout, backoffs between them, then the close."""
    config = BrokerConfig.load(None, {
        "zookeeper.connect": "127.0.0.1:2181", "request.timeout.ms": "3000",
        "controlled.shutdown.max.retries": "2", "controlled.shutdown.retry.backoff.ms": "500"})
    assert shutdown_bound_s(config) == 2 * 3 + 0.5 + 30
    assert shutdown_bound_s(BrokerConfig.load(None, {
        "zookeeper.connect": "127.0.0.1:2181", "controlled.shutdown.enable": "false"})) == 30


def test_brokers_without_zookeeper_for_a_while_answer_and_stop_cleanly(big: Cluster) -> None:
    """ZooKeeper killed under running brokers: the controller and the metadata cache go
    on calling it, which must not block a broker's event loop (kazoo's wake-up socket
    pair filled after 278 calls and blocked it until ZooKeeper came back): each still
    answers clients, and later stops cleanly within its bound."""
    restart_stopped(big)
    brokers = list(big.brokers.values())
    big.zookeeper.kill()
    time.sleep(ZOOKEEPER_GONE_S)
    for broker in brokers:
        with WireConnection(broker.bootstrap, timeout=5) as connection:
            view = connection.request(ApiKey.METADATA, METADATA_VERSION,
                                      metadata_request([TOPIC], False))
        assert len(view.topics[0].partitions) == PARTITIONS
    for broker in brokers:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
    exits = wait_exit(brokers, max(bound_s(b) for b in brokers))
    assert all(code == 0 for code, _ in exits.values()), exits
    assert all(clean(b) for b in brokers), [b.log_tail() for b in brokers]
