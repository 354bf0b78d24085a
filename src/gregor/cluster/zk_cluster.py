"""ZkClusterMember: one broker's membership of a ZooKeeper-coordinated cluster.

It owns the broker's ZooKeeper session and everything that hangs off it: the
metadata cache every broker keeps, the admin writes any broker makes, the
controller this broker may become, its registration under ``/brokers/ids``, and
what a lost session or a controlled shutdown means for them.

Order matters at start-up: the broker reads the cluster's metadata and opens
(and if need be recovers) its logs before it registers, so the controller never
hands leadership to a broker that is still recovering.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NodeExistsError

from gregor.cluster import znodes
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata, new_cluster_id
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.zk_acls import ZkAcls
from gregor.cluster.zk_admin import ZkClusterAdmin
from gregor.cluster.zk_controller import ZkController, leaderships_to_move
from gregor.cluster.zk_metadata import MetadataListeners, ZkMetadataCache
from gregor.cluster.zk_user_configs import ZkUserConfigs
from gregor.cluster.zookeeper import ZooKeeperSession
from gregor.config import BrokerConfig

log = logging.getLogger(__name__)

# How often a controlled shutdown looks again at which other brokers are stopping.
_SHUTDOWNS_POLL_S = 1.0
# How often a broker whose previous registration is still there (it was killed and
# restarted within its old session's timeout) looks again.
_REGISTRATION_RETRY_S = 0.2


class ControlledShutdownFailed(Exception):
    """An attempt at a controlled shutdown cannot be made now."""


class ZkClusterMember:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.image = MetadataImage(path=None, cluster_id="")
        self.zk = ZooKeeperSession(config["zookeeper.connect"],
                                   config["zookeeper.session.timeout.ms"],
                                   on_state=self._session_state_changed,
                                   source_address=config.source_address)
        self.cache = ZkMetadataCache(self.zk, self.image)
        self.admin = ZkClusterAdmin(config, self.zk, self.image, self.cache)
        self.controller = ZkController(config, self.zk, self.image, self.cache)
        self.user_configs = ZkUserConfigs(self.zk, self.image)
        self.acls = ZkAcls(self.zk, self.image)
        self._endpoints: tuple[znodes.Endpoint, ...] = ()
        # Called once registered again in a new session (the old one's ephemeral nodes,
        # such as this broker's offline replicas, went with it).
        self.reregistered: Callable[[], None] = lambda: None
        self._session_lost = False
        self._closing = False
        self._tasks: set[asyncio.Task] = set()

    def isr_eligible(self, broker_id: int) -> bool:
        """Registered and not in a controlled shutdown (Kafka's isReplicaIsrEligible)."""
        return broker_id in self.image.brokers and broker_id not in self.image.shutting_down

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        registration = self.image.brokers.get(broker_id)
        return None if registration is None else (registration.host, registration.port)

    # ------------------------------------------------------------------ start-up
    async def connect(self) -> None:
        """Join ZooKeeper and read the cluster's metadata (before the logs are opened)."""
        await self.zk.start(self.config["zookeeper.connection.timeout.ms"] / 1000)
        for path in znodes.PERSISTENT_PATHS:
            await self.zk.ensure(path)
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(new_cluster_id()))
        found = await self.zk.get(znodes.CLUSTER_ID)
        assert found is not None
        self.image.cluster_id = znodes.decode_cluster_id(found[0])
        await self.cache.start()
        await self.user_configs.start()
        await self.acls.start()

    def follow(self, partition_changed: Callable[[TopicMetadata, int, PartitionState], None],
               topic_deleted: Callable[[TopicMetadata], None],
               topic_config_changed: Callable[[TopicMetadata], None],
               broker_configs_changed: Callable[[MetadataImage], None],
               brokers_changed: Callable[[], None]) -> None:
        """Hand metadata changes to the broker's replicas (and to the controller)."""
        controller = self.controller

        def on_partition(topic: TopicMetadata, index: int, state: PartitionState) -> None:
            partition_changed(topic, index, state)
            controller.partition_changed(topic.name, index)

        def on_deleted(topic: TopicMetadata) -> None:
            topic_deleted(topic)
            controller.changed()

        def on_brokers(gone: set[int], joined: set[int]) -> None:
            brokers_changed()
            controller.changed()

        self.cache.listeners = MetadataListeners(
            partition_changed=on_partition, topic_deleted=on_deleted,
            topic_created=lambda topic: controller.changed(),
            topic_config_changed=topic_config_changed,
            broker_configs_changed=broker_configs_changed,
            brokers_changed=on_brokers, shutdowns_changed=brokers_changed,
            controller_changed=self._controller_changed)

    async def register(self, endpoints: tuple[znodes.Endpoint, ...]) -> None:
        """Announce this broker as live, reachable at ``endpoints`` (the inter-broker
        listener's first), then run for controller."""
        self._endpoints = endpoints
        await self._register()
        await self.controller.try_to_become_controller()

    async def _register(self) -> None:
        endpoints = self._endpoints
        assert endpoints
        registration = znodes.BrokerRegistration(
            self.broker_id, endpoints[0].host, endpoints[0].port, self.config.rack,
            endpoints=endpoints)
        path = znodes.broker_path(self.broker_id)
        deadline = time.monotonic() + 2 * self.config["zookeeper.session.timeout.ms"] / 1000
        while True:
            try:
                await self.zk.create(path, registration.encode(), ephemeral=True)
                break
            except NodeExistsError:
                # Our previous incarnation's session has not expired yet (kill -9 and a
                # quick restart): Kafka waits for it too rather than take over its node.
                stat = await self.zk.exists(path)
                if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker id {self.broker_id} is registered by another "
                                       "live broker") from None
                await asyncio.sleep(_REGISTRATION_RETRY_S)
        log.info("registered broker %d at %s in ZooKeeper", self.broker_id,
                 ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in endpoints))

    # ------------------------------------------------------------------ sessions
    def _controller_changed(self, controller_id: int) -> None:
        if controller_id != self.broker_id and self.controller.is_active:
            self.controller.resign()
        if controller_id < 0 and self._endpoints:
            self._spawn(self.controller.try_to_become_controller())

    def _session_state_changed(self, state: str) -> None:
        if self._closing:
            return
        if state == KazooState.LOST:
            # The session expired: our registration, and /controller if we held it, are
            # gone, and other brokers lead our partitions now.
            log.warning("ZooKeeper session lost: broker %d is no longer registered",
                        self.broker_id)
            self._session_lost = True
            self.controller.resign()
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection lost; the session may expire")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._spawn(self._rejoin())

    async def _rejoin(self) -> None:
        """A new session: watches of the old one are gone; read everything again."""
        log.info("ZooKeeper session re-established; re-registering broker %d", self.broker_id)
        await self.cache.start()
        await self.user_configs.start()
        await self.acls.start()
        if self._endpoints:
            await self._register()
            self.reregistered()
            await self.controller.try_to_become_controller()

    def _spawn(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- shutdown
    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships, and wait until it has,
        so producers at acks=all see no error; then, or after the last failed attempt,
        the broker stops anyway.

        As Kafka's: ``controlled.shutdown.max.retries`` attempts, each given
        ``request.timeout.ms`` (``shutdown.controlled_shutdown_bound_s``), with
        ``controlled.shutdown.retry.backoff.ms`` between them. An attempt fails at once
        without a ZooKeeper connection or a controller, and one whose request or wait
        ZooKeeper never answers (it went away: kazoo holds the request until it
        reconnects) fails at its timeout. It succeeds once nothing is left that the
        controller could move: a partition whose other in-sync replicas are all
        stopping too stays, as Kafka's controller leaves it (all brokers stopped at
        once must not wait for each other)."""
        if not self.config["controlled.shutdown.enable"]:
            return
        attempts = self.config["controlled.shutdown.max.retries"]
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self.config["controlled.shutdown.retry.backoff.ms"] / 1000)
            try:
                staying = await self._controlled_shutdown_attempt(
                    time.monotonic() + self.config["request.timeout.ms"] / 1000)
            except (TimeoutError, ControlledShutdownFailed, KazooException) as exc:
                log.warning("controlled shutdown: attempt %d of %d failed (%s)", attempt,
                            attempts, str(exc) or type(exc).__name__)
                continue
            log.info("controlled shutdown: leaderships moved%s",
                     f" ({staying} partition(s) have no other replica to move to)"
                     if staying else "")
            return
        if attempts:
            log.warning("controlled shutdown: %d partition(s) still to move; stopping anyway",
                        len(leaderships_to_move(self.image, self.broker_id)))

    async def _controlled_shutdown_attempt(self, deadline: float) -> int:
        """One attempt: ask, then wait (woken by each change of the cluster's metadata,
        and once a second for other brokers' shutdowns) until nothing is left to move;
        how many partitions stay, with no other replica to take them. TimeoutError at
        ``deadline``, kept by each wait rather than by cancelling the attempt from
        outside: Python 3.11's wait_for loses a cancellation that coincides with its
        inner wait ending, which the controller's stream of changes made likely (an
        attempt seen running 39 s past its timeout)."""
        if not self.zk.connected:
            raise ControlledShutdownFailed("no ZooKeeper connection")
        if self.image.controller_id not in self.image.brokers:
            raise ControlledShutdownFailed("no controller")
        with contextlib.suppress(NodeExistsError):
            await asyncio.wait_for(self.zk.create(
                f"{znodes.CONTROLLED_SHUTDOWN}/{self.broker_id}", ephemeral=True, makepath=True),
                deadline - time.monotonic())
        while True:
            # The brokers shutting down, as the metadata cache's watch keeps them: a
            # read of its own each time round queued behind whatever else this broker
            # had asked ZooKeeper (at 10,000 partitions, an attempt's whole timeout).
            stopping = self.image.shutting_down
            pending = leaderships_to_move(self.image, self.broker_id)
            movable = [(topic, index) for topic, index in pending
                       if _takers(self.image, topic, index, self.broker_id) - stopping]
            if not movable:
                return len(pending)
            if time.monotonic() >= deadline:
                raise TimeoutError
            await self.cache.wait_for_change(min(_SHUTDOWNS_POLL_S, deadline - time.monotonic()))

    async def close(self) -> None:
        self._closing = True
        self.controller.resign()
        self.cache.close()
        for task in self._tasks:
            task.cancel()
        await self.zk.close()


def _takers(image: MetadataImage, topic: str, index: int, broker_id: int) -> set[int]:
    """The live in-sync replicas, besides ``broker_id``, that could take over a partition."""
    return {r for r in image.topics[topic].partitions[index].isr
            if r != broker_id and r in image.brokers}
