"""Broker: wires config, storage, cluster state and the network server together."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from gregor.broker import group_routes, transactions
from gregor.broker.allocator import keep_large_buffers_in_heap
from gregor.broker.authentication import scram_credential
from gregor.broker.connection import MIN_REQUEST_SIZE, Connection
from gregor.broker.frame_protocol import FrameProtocol
from gregor.broker.log_flusher import LogFlusher
from gregor.broker.metadata import EncodedPartitions
from gregor.broker.request import Request
from gregor.broker.router import Router
from gregor.broker.shutdown import CLOSE_BOUND_S, StopSignals, shutdown_bound_s
from gregor.cluster.acl_store import AclStore, ImageAcls
from gregor.cluster.controller import ClusterAdmin, SingleNodeController
from gregor.cluster.log_dir_events import LogDirFailureNotifier
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_manager import ReplicaManager
from gregor.cluster.user_configs import ImageUserConfigs, UserConfigs
from gregor.cluster.zk_cluster import ZkClusterMember
from gregor.cluster.znodes import BrokerRegistration, Endpoint
from gregor.config import BrokerConfig, ConfigError, TopicConfig
from gregor.groups.coordinator import GroupCoordinator
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.metrics.broker_metrics import BrokerMetrics
from gregor.metrics.endpoint import MetricsServer
from gregor.security import listeners as security_listeners
from gregor.security import tls
from gregor.security.acls import Authorizer, authorizer_enabled, super_users
from gregor.security.inter_broker import inter_broker_security
from gregor.security.listeners import Listener
from gregor.security.quotas import QuotaManager
from gregor.security.sasl_mechanisms import listener_sasl
from gregor.storage.checkpoint_file import write_atomically
from gregor.storage.cleaner import LogCleaner
from gregor.storage.log_manager import LogManager
from gregor.transactions.coordinator import TransactionCoordinator
from gregor.transactions.state_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

_CHECKPOINT_INTERVAL_S = 5.0
_WARN_WINDOW_S = 60.0
# Each step of a stop that may wait on other processes: seven of them leave about
# half of CLOSE_BOUND_S to flush and close the logs.
_CLOSE_STEP_S = CLOSE_BOUND_S / 14


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        # Each directory is made (or found unusable, and offline) by the LogManager.
        self.log_manager = LogManager(config.log_dirs)
        self.log_flusher = LogFlusher()
        self.log_manager.segment_flusher = self.log_flusher.segment_rolled
        self.log_manager.active_segment_flusher = self.log_flusher.segment_due
        self.log_manager.checkpoint_writer = self.log_flusher.write
        self.log_flusher.on_storage_error = self.log_manager.dir_failed
        # In a cluster, metadata lives in ZooKeeper; alone, in a file beside the logs.
        self.cluster = ZkClusterMember(config) if config.zookeeper_mode else None
        self.controller: ClusterAdmin
        # How to reach the other brokers' inter-broker listener (TLS, SASL); alone, none.
        channel_security = inter_broker_security(config) if config.zookeeper_mode else None
        if self.cluster is not None:
            self.image = self.cluster.image
            self.replica_manager = ReplicaManager(
                config, self.log_manager, broker_address=self.cluster.broker_address,
                alter_isr=self.cluster.admin.alter_isr, isr_eligible=self.cluster.isr_eligible,
                channel_security=channel_security)
            self.controller = self.cluster.admin
            # Partitions lost with a failed log directory, told to the controller.
            self.log_dir_failures = LogDirFailureNotifier(self.cluster.zk, self.broker_id)
            self.replica_manager.on_offline = self.log_dir_failures.report
            self.replica_manager.on_offline_changed = self.log_dir_failures.offline_changed
            self.cluster.reregistered = self.log_dir_failures.registered
        else:
            self.image = MetadataImage.load(config.log_dir)
            self.replica_manager = ReplicaManager(config, self.log_manager)
            self.controller = SingleNodeController(config, self.image, self.replica_manager)
        self.router = Router()
        self.encoded_partitions = EncodedPartitions()  # Metadata answers' partition arrays
        # None when metrics.listener is unset: the hot path then counts nothing.
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        metrics_listener = config.metrics_listener
        if metrics_listener is not None:
            self.metrics = BrokerMetrics()
            self.metrics_server = MetricsServer(self, self.metrics, metrics_listener)
        self.group_coordinator = GroupCoordinator(config, self.controller, self.replica_manager)
        group_routes.register(self.router)
        self.transaction_coordinator = TransactionCoordinator(
            config, self.controller, self.replica_manager, self.group_coordinator,
            self.cluster.broker_address if self.cluster is not None else _no_address,
            channel_security)
        transactions.register(self.router)
        self.listeners = security_listeners.listeners(config)
        self.inter_broker_listener = security_listeners.inter_broker_listener(config)
        # Each listener's advertised address, with the ports bound once bound (port 0).
        self.advertised = security_listeners.advertised(config, {})
        # Users' entity configs (SCRAM credentials): in ZooKeeper or the metadata file.
        self.user_configs: UserConfigs = (
            self.cluster.user_configs if self.cluster is not None
            else ImageUserConfigs(self.image))
        self.acl_store: AclStore = (self.cluster.acls if self.cluster is not None
                                    else ImageAcls(self.image))
        # Client quotas, measured only while some entity sets one.
        self.quotas = QuotaManager(lambda: self.image.client_quotas, config["quota.window.num"],
                                   config["quota.window.size.seconds"],
                                   config["controller.quota.window.num"]
                                   * config["controller.quota.window.size.seconds"])
        # None unless authorizer.class.name is set: then every API checks its ACLs.
        self.authorizer = Authorizer(lambda: self.image.acls, super_users(config),
                                     config["allow.everyone.if.no.acl.found"]
                                     ) if authorizer_enabled(config) else None
        # The mechanisms of each SASL listener, checked now so a bad setting stops the start.
        self.sasl = {listener.name: listener_sasl(config, listener.name, functools.partial(
                         scram_credential, self))
                     for listener in self.listeners if listener.protocol.sasl}
        self.advertised_address = self.advertised[self.listeners[0].name]
        self.bound_address = self.advertised_address  # the first listener, once bound
        self.bound_ports: dict[str, int] = {}  # every listener's, by name, once bound
        # Each TLS listener's context, whose key store a running broker may load again.
        self._tls_contexts: dict[str, ssl.SSLContext] = {}
        config.key_stores_changed = self._reload_key_stores
        config.sasl_changed = self._reload_sasl
        self._servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task] = []
        self._connections: set[asyncio.Task] = set()
        self._warned: dict[str, float] = {}

    # ---------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Open every log and partition named in the metadata image, with the dynamic
        broker configs it holds (the topics' defaults) in force."""
        self.config.set_dynamic(*self.image.dynamic_broker_configs(self.broker_id))

        def config_for(topic: str) -> TopicConfig | None:
            meta = self.image.topics.get(topic)
            return None if meta is None else TopicConfig(self.config, meta.configs)

        self.log_manager.load_logs(config_for)
        for topic in self.image.topics.values():
            if self.cluster is None:
                self.replica_manager.make_partitions(topic, existing=True)
            else:
                for index, state in enumerate(topic.partitions):
                    self._partition_changed(topic, index, state)
        if self.log_manager.futures:  # moves between log directories a stop interrupted
            self.replica_manager.moves.resume()

    def _partition_changed(self, topic: TopicMetadata, index: int, state: PartitionState) -> None:
        """Follow the controller's decision for one partition: lead, follow, or drop it."""
        if self.broker_id in state.replicas:
            if state.partition_epoch >= 0:
                self.replica_manager.apply_partition_state(topic, index, state)
                if topic.name == OFFSETS_TOPIC:
                    self.group_coordinator.leadership_changed(
                        index, state.leader == self.broker_id)
                elif topic.name == TRANSACTION_STATE_TOPIC:
                    self.transaction_coordinator.leadership_changed(
                        index, state.leader == self.broker_id, state.leader_epoch)
        elif self.replica_manager.get(topic.name, index) is not None:
            self.replica_manager.remove_partition(topic.name, index)

    async def start(self) -> None:
        """Bind, load, serve, register, in that order. Binding comes first so that a
        port held by another process fails the start at once, before a long log
        recovery or a ZooKeeper session; serving comes after loading, so that no client
        is answered before every log is open."""
        await self._bind()
        if self.cluster is not None:
            await self.cluster.connect()
        self.load()
        if self.cluster is not None:
            self.cluster.follow(
                self._partition_changed,
                topic_deleted=lambda topic: self.replica_manager.remove_topic(topic.name),
                topic_config_changed=self.replica_manager.update_config,
                broker_configs_changed=self.replica_manager.broker_configs_changed,
                brokers_changed=self.replica_manager.brokers_changed)
        self.group_coordinator.start()
        await self.transaction_coordinator.start()
        for server in self._servers:
            await server.start_serving()
            host, port = server.sockets[0].getsockname()[:2]
            log.info("listening on %s:%s", host, port)
        if self.metrics_server is not None:
            await self.metrics_server.start()
        host, port = self.advertised_address
        endpoints = self._endpoints()
        if self.cluster is not None:
            await self.cluster.register(endpoints)
            self.log_dir_failures.registered()
        else:
            # Alone, the broker is the cluster's only live broker and its controller.
            self.image.brokers = {self.broker_id: BrokerRegistration(
                self.broker_id, endpoints[0].host, endpoints[0].port, self.config.rack,
                endpoints=endpoints)}
            self.image.controller_id = self.broker_id
        self._tasks = [
            self._every(self.config["log.retention.check.interval.ms"] / 1000,
                        self._apply_retention),
            self._every(self.config["log.flush.scheduler.interval.ms"] / 1000,
                        lambda: self.log_manager.flush_due(_now_ms())),
            self._every(_CHECKPOINT_INTERVAL_S, self._checkpoint),
            self._every(self.config["offsets.retention.check.interval.ms"] / 1000,
                        self.group_coordinator.expire_offsets),
            self._every(
                self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
                / 1000, self.transaction_coordinator.abort_timed_out),
            self._every(
                self.config["transaction.remove.expired.transaction.cleanup.interval.ms"]
                / 1000, self.transaction_coordinator.expire_transactional_ids),
        ]
        if self.cluster is not None:
            self._tasks.append(asyncio.create_task(self.replica_manager.run_isr_checks()))
        if self.config["log.cleaner.enable"]:
            # Compaction never goes past what consumers may read: the high watermark.
            cleaner = LogCleaner(self.log_manager, lambda tp: (
                p.high_watermark if (p := self.replica_manager.get(*tp)) else None))
            self._tasks.append(asyncio.create_task(cleaner.run(
                self.config["log.cleaner.backoff.ms"])))
        log.info("broker %d started; advertising %s:%d; data in %s", self.broker_id, host, port,
                 ", ".join(map(str, self.config.log_dirs)))

    async def _bind(self) -> None:
        """Bind every listener without accepting yet (connections are refused until
        ``start_serving``), each with its TLS context if it has one. The first listener
        is the broker's address; a listener on port 0 (tests) advertises the port the
        kernel chose unless ``advertised.listeners`` names another."""
        loop = asyncio.get_running_loop()
        max_request = self.config["socket.request.max.bytes"]
        bound_ports: dict[str, int] = {}
        for listener in self.listeners:
            context = (tls.server_context(self.config, listener.name, listener.protocol.sasl)
                       if listener.protocol.tls else None)
            server = await loop.create_server(
                functools.partial(FrameProtocol, MIN_REQUEST_SIZE, max_request,
                                  functools.partial(self._on_connect, listener)),
                listener.host or None, listener.port, reuse_address=True, backlog=1024,
                start_serving=False, ssl=context)
            self._servers.append(server)
            if context is not None:
                self._tls_contexts[listener.name] = context
            bound_ports[listener.name] = server.sockets[0].getsockname()[1]
        if self.metrics_server is not None:
            await self.metrics_server.bind()
        bound = self._servers[0].sockets[0].getsockname()
        self.bound_address = (bound[0], bound[1])
        self.bound_ports = bound_ports
        self.advertised = security_listeners.advertised(self.config, bound_ports)
        self.advertised_address = self.advertised[self.listeners[0].name]

    def _reload_key_stores(self) -> None:
        """This broker's key store settings changed while it runs (AlterConfigs, checked
        then): every TLS listener takes its key store again, without a restart."""
        for name, context in self._tls_contexts.items():
            try:
                tls.reload_key_store(context, self.config, name)
                log.info("listener %s: key store loaded again", name)
            except ConfigError as exc:
                log.error("listener %s keeps its certificate: %s", name, exc)

    def _reload_sasl(self) -> None:
        """This broker's SASL settings changed while it runs (AlterConfigs, checked then):
        each SASL listener serves its mechanisms and PLAIN users anew from the next
        authentication on; authenticated connections stay as they are."""
        for listener in self.listeners:
            if listener.protocol.sasl:
                try:
                    self.sasl[listener.name] = listener_sasl(
                        self.config, listener.name, functools.partial(scram_credential, self))
                    log.info("listener %s: SASL settings taken again", listener.name)
                except ConfigError as exc:
                    log.error("listener %s keeps its SASL settings: %s", listener.name, exc)

    def _endpoints(self) -> tuple[Endpoint, ...]:
        """Every listener as advertised, the inter-broker one first (replicas use it)."""
        ordered = sorted(self.listeners,
                         key=lambda item: item.name != self.inter_broker_listener.name)
        return tuple(Endpoint(item.name, item.protocol.value, *self.advertised[item.name])
                     for item in ordered)

    async def stop(self) -> None:
        """Stop cleanly, within ``shutdown.shutdown_bound_s`` whatever ZooKeeper, the
        controller or the other brokers do: the controlled shutdown is bounded by its
        settings, and each later step that may wait on another process gets a bounded
        share of ``CLOSE_BOUND_S``, so that the logs are flushed and closed, and the
        clean-shutdown marker written, in any case (the watchdog of ``shutdown`` ends
        the process only if something still holds it after that)."""
        if self.cluster is not None:
            await self.cluster.controlled_shutdown()
        for server in self._servers:
            server.close()
        if self.metrics_server is not None:
            await self._bounded("the metrics listener", self.metrics_server.stop())
        for task in [*self._tasks, *self._connections]:
            task.cancel()
        await self._bounded("background tasks and connections", asyncio.gather(
            *self._tasks, *self._connections, return_exceptions=True))
        await self._bounded("the listeners", asyncio.gather(
            *(server.wait_closed() for server in self._servers)))
        await self._bounded("the group coordinator", self.group_coordinator.shutdown())
        await self._bounded("the transaction coordinator",
                            self.transaction_coordinator.shutdown())
        await self._bounded("the replica fetchers", self.replica_manager.stop())
        await self.log_flusher.drain()
        self.log_flusher.close()
        self.log_manager.shutdown(self.replica_manager.high_watermarks(),
                                  self.config["num.recovery.threads.per.data.dir"])
        if self.cluster is not None:
            await self._bounded("the ZooKeeper session", self.cluster.close())
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _bounded(self, what: str, step: Awaitable[object]) -> None:
        """Wait for one step of ``stop`` at most ``_CLOSE_STEP_S``, then go on without it."""
        try:
            await asyncio.wait_for(step, _CLOSE_STEP_S)
        except TimeoutError:
            log.warning("stopping: %s did not close within %.0f s; going on without",
                        what, _CLOSE_STEP_S)

    async def serve_forever(self, stop: asyncio.Event, ready_file: str | None = None) -> None:
        """Serve until ``stop`` is set. ``ready_file`` is the broker's own word that it
        serves, for whoever started it (a connect would only say that something
        listens): written atomically once started, with the address it listens on (the
        port the kernel chose, with port 0), and removed again when it stops."""
        await self.start()
        if ready_file is not None:
            host, port = self.bound_address
            ready = {"broker_id": self.broker_id, "host": host, "port": port, "pid": os.getpid(),
                     "listeners": self.bound_ports}
            if self.metrics_server is not None:
                ready["metrics_url"] = self.metrics_server.url
            write_atomically(Path(ready_file), json.dumps(ready))
        try:
            await stop.wait()
        finally:
            if ready_file is not None:
                Path(ready_file).unlink(missing_ok=True)
            await self.stop()

    # --------------------------------------------------------------- internals
    def _on_connect(self, listener: Listener, frames: FrameProtocol) -> None:
        assert frames.transport is not None
        self._size_socket_buffers(frames.transport.get_extra_info("socket"))
        task = asyncio.create_task(Connection(self, frames, listener).run())
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    def _size_socket_buffers(self, sock: socket.socket | None) -> None:
        """Kafka's socket.send/receive.buffer.bytes, -1 keeping the OS's own sizing."""
        if sock is None:
            return
        for option, name in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                             (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
            if self.config[name] >= 0:
                sock.setsockopt(socket.SOL_SOCKET, option, self.config[name])

    def _every(self, interval_s: float, action: Callable[[], object | Awaitable[object]]
               ) -> asyncio.Task:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    result = action()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("background task %s failed", getattr(action, "__name__", action))

        return asyncio.create_task(loop())

    def _apply_retention(self) -> None:
        if self.log_manager.apply_retention(_now_ms(), self.config["producer.id.expiration.ms"]):
            for tp in list(self.replica_manager.partitions):
                self.replica_manager.notify(tp)

    async def _checkpoint(self) -> None:
        writer = self.log_manager.periodic_checkpoint(self.replica_manager.high_watermarks())
        if writer is not None:
            await self.log_flusher.write(writer)

    # ------------------------------------------------------------------ logging
    def warn_once(self, kind: str, message: str, *args: object,
                  exc_info: BaseException | None = None) -> None:
        """Log a client misbehaviour at most once a minute per kind, so a bad client
        cannot flood the log. With ``exc_info`` (a failure the client triggered, so a
        bug of ours) it is logged as an error with its traceback.

        Callers keep the number of kinds bounded (never a raw client value in it):
        each kind stays in memory."""
        now = time.monotonic()
        if now - self._warned.get(kind, -_WARN_WINDOW_S) >= _WARN_WINDOW_S:
            self._warned[kind] = now
            log.log(logging.WARNING if exc_info is None else logging.ERROR, message, *args,
                    exc_info=exc_info)

    def log_rejection(self, request: Request, topic: str, partition: int, exc: Exception) -> None:
        self.warn_once(f"reject-{topic}-{getattr(exc, 'error', type(exc).__name__)}",
                       "rejected produce to %s-%d from %s: %s", topic, partition,
                       request.client_host, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _no_address(broker_id: int) -> None:
    """Alone, there is no other broker to reach."""
    return None


async def run_broker(config: BrokerConfig, ready_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then stop cleanly (flush, checkpoint, clean-shutdown
    marker) within ``shutdown_bound_s``; a second signal exits at once."""
    keep_large_buffers_in_heap()
    stop = asyncio.Event()
    StopSignals(stop, shutdown_bound_s(config)).install()
    await Broker(config).serve_forever(stop, ready_file)
