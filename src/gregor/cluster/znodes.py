"""Kafka's classic ZooKeeper layout: the paths and the JSON stored at each.

Following Kafka's own znodes (ZooKeeper mode, Kafka 2.x-3.x) keeps the cluster
state readable with the usual ZooKeeper tools and familiar to Kafka operators:

- ``/brokers/ids/<id>``: ephemeral registration (endpoints, rack); its creation
  zxid is the broker epoch (KIP-380).
- ``/controller`` (ephemeral, the controller's id) and ``/controller_epoch``
  (bumped at each election; every controller write is conditioned on it).
- ``/brokers/topics/<topic>``: replica assignment and topic id;
  ``.../partitions/<p>/state``: leader, leader epoch, ISR. The state znode's
  version is the partition epoch that conditional ISR and leader writes name.
- ``/partition_state_changes/change-<seq>``: every write of partition states (the
  controller's batches, a leader's ISR change) also writes one of these, in the
  same multi-op, holding the states written. Brokers watch this one node's
  children rather than every state znode: a batch of 10,000 states reaches each
  broker as a few reads, not 10,000 (ZooKeeper mode Kafka had the like in
  ``/isr_change_notification``, with the controller relaying the states by RPC).
- ``/config/topics/<topic>``: topic config overrides.
- ``/admin/delete_topics/<topic>``: pending deletions, carried out by the controller.
- ``/admin/reassign_partitions``: reassignments asked for the pre-KIP-455 way (tools
  still write it); the controller starts them, and deletes the node once all are done.
- ``/admin/controlled_shutdown/<id>``: ephemeral, a broker asking to be drained before
  it stops (where Kafka sends ControlledShutdown to the controller); every broker
  watches it, since a leader must neither wait for nor re-admit such a broker.
- ``/latest_producer_id_block``: cluster-unique producer id blocks.
- ``/cluster/id``: the cluster id.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gregor.cluster.partition_state import PartitionState, Reassignment
from gregor.cluster.zookeeper import Create

T = TypeVar("T")

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"  # <default> and each broker's id: dynamic configs
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
STATE_CHANGES = "/partition_state_changes"
STATE_CHANGE_PREFIX = f"{STATE_CHANGES}/change-"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
# gregor's: each live broker's replicas on failed log directories (KIP-112), an
# ephemeral node per broker, read by every broker (Metadata's offline_replicas) and by
# a newly elected controller. Kafka's controller holds this in memory and sends it in
# UpdateMetadata; gregor's brokers follow ZooKeeper instead.
OFFLINE_REPLICAS = "/offline_replicas"

# Every path a fresh cluster needs before brokers register and watch.
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, BROKER_CONFIGS, DELETE_TOPICS,
                    CONTROLLED_SHUTDOWN, STATE_CHANGES, OFFLINE_REPLICAS, "/cluster")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def broker_config_path(entity: str) -> str:
    return f"{BROKER_CONFIGS}/{entity}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dump(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _load(data: bytes) -> dict[str, Any]:
    return json.loads(data.decode())


# ------------------------------------------------------------------------- brokers
@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker as clients of that listener reach it."""

    listener: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    host: str  # the inter-broker listener's address (the first endpoint)
    port: int
    rack: str | None = None
    # The czxid of the registration znode (KIP-380): a restarted broker has a newer one.
    epoch: int = -1
    # Every listener, the inter-broker one first; empty: only ``host``:``port``, PLAINTEXT.
    endpoints: tuple[Endpoint, ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where clients of ``listener`` reach this broker; None if it has no such
        listener (Kafka then leaves the broker out of their Metadata)."""
        if not self.endpoints:
            return (self.host, self.port) if listener == "PLAINTEXT" else None
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None

    def encode(self) -> bytes:
        endpoints = self.endpoints or (Endpoint("PLAINTEXT", "PLAINTEXT", self.host, self.port),)
        payload: dict[str, Any] = {
            "version": 5, "host": self.host, "port": self.port, "jmx_port": -1,
            "endpoints": [f"{e.listener}://{e.host}:{e.port}" for e in endpoints],
            "listener_security_protocol_map": {e.listener: e.security_protocol
                                               for e in endpoints},
            "timestamp": str(int(time.time() * 1000)), "features": {},
        }
        if self.rack is not None:
            payload["rack"] = self.rack
        return _dump(payload)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
        raw = _load(data)
        protocols = raw.get("listener_security_protocol_map") or {}
        endpoints = []
        for text in raw.get("endpoints", []):
            listener, _, address = text.partition("://")
            host, _, port_text = address.rpartition(":")
            endpoints.append(Endpoint(listener, protocols.get(listener, listener),
                                      host.strip("[]"), int(port_text)))
        host, port = raw.get("host"), raw.get("port", -1)
        if endpoints:
            # The first: the listener replicas use, as encode orders them.
            host, port = endpoints[0].host, endpoints[0].port
        return cls(broker_id, str(host), int(port), raw.get("rack"), epoch, tuple(endpoints))


# -------------------------------------------------------------------------- topics
def kafka_uuid(topic_id: str) -> str:
    """Kafka prints a Uuid as 16 bytes of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.UUID(topic_id).bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> str:
    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))))


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's ``/brokers/topics/<topic>`` node: each partition's replica set and, while
    one is being reassigned (KIP-455), the replicas it is adding and removing, in
    Kafka's layout, so that a new controller resumes a reassignment in progress."""

    topic_id: str  # str(uuid.UUID), as TopicMetadata keeps it
    replicas: tuple[tuple[int, ...], ...]  # per partition, in assignment (preference) order
    reassigning: dict[int, Reassignment] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dump({
            "version": 3, "topic_id": kafka_uuid(self.topic_id),
            "partitions": {str(i): list(r) for i, r in enumerate(self.replicas)},
            "adding_replicas": {str(i): list(r.adding) for i, r in self.reassigning.items()
                                if r.adding},
            "removing_replicas": {str(i): list(r.removing)
                                  for i, r in self.reassigning.items() if r.removing},
        })

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        raw = _load(data)
        partitions = raw["partitions"]
        adding = raw.get("adding_replicas") or {}
        removing = raw.get("removing_replicas") or {}
        return cls(parse_kafka_uuid(raw["topic_id"]),
                   tuple(tuple(partitions[str(i)]) for i in range(len(partitions))),
                   {int(i): Reassignment(tuple(adding.get(i, ())), tuple(removing.get(i, ())))
                    for i in sorted(set(adding) | set(removing), key=int)})


def encode_legacy_reassignment(targets: dict[tuple[str, int], tuple[int, ...]]) -> bytes:
    """``/admin/reassign_partitions`` as kafka-reassign-partitions.sh wrote it before 2.4."""
    return _dump({"version": 1, "partitions": [
        {"topic": topic, "partition": index, "replicas": list(replicas)}
        for (topic, index), replicas in targets.items()]})


def decode_legacy_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    return {(str(p["topic"]), int(p["partition"])): tuple(int(r) for r in p["replicas"])
            for p in _load(data).get("partitions", [])}


def _partition_state_fields(state: PartitionState) -> dict[str, Any]:
    return {"controller_epoch": state.controller_epoch, "leader": state.leader,
            "version": 1, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}


def encode_partition_state(state: PartitionState) -> bytes:
    """Kafka's partition state JSON, formatted directly: its fields are integers, and
    ``json.dumps`` of each of 10,000 states was an eighth of a controller's time moving
    them (the bytes are the same; ``tests/test_znodes.py`` holds the two together)."""
    isr = ",".join(map(str, state.isr))
    return (f'{{"controller_epoch":{state.controller_epoch},"leader":{state.leader},'
            f'"version":1,"leader_epoch":{state.leader_epoch},"isr":[{isr}]}}').encode()


def decode_partition_state(data: bytes, replicas: tuple[int, ...], version: int
                           ) -> PartitionState:
    """The state znode's JSON; its znode ``version`` is the partition epoch."""
    raw = _load(data)
    return PartitionState(leader=raw["leader"], leader_epoch=raw["leader_epoch"],
                          isr=tuple(raw["isr"]), replicas=replicas, partition_epoch=version,
                          controller_epoch=raw["controller_epoch"])


@dataclass(frozen=True, slots=True)
class StateChange:
    """One partition state as written: its topic's id (a topic deleted and created again
    under its name starts its epochs over) and the state (its partition epoch is the
    version the state znode took)."""

    topic: str
    topic_id: str
    index: int
    state: PartitionState


def encode_state_changes(changes: list[StateChange]) -> bytes:
    return _dump({"version": 1, "partitions": [
        {"topic": c.topic, "topic_id": c.topic_id, "partition": c.index,
         "partition_epoch": c.state.partition_epoch,
         "state": _partition_state_fields(c.state)} for c in changes]})


# Partition state writes per ZooKeeper multi-op (the controller's and the leaders'):
# a few dozen KB of request, far below ZooKeeper's 1 MB jute.maxbuffer.
STATE_WRITES_PER_MULTI = 200


def multi_op_batches(items: list[T], size: int = STATE_WRITES_PER_MULTI) -> list[list[T]]:
    """``items`` in runs of ``size``: one multi-op each."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def state_change_node(changes: list[StateChange]) -> Create:
    """The change node a multi-op writing ``changes`` also creates."""
    return Create(STATE_CHANGE_PREFIX, encode_state_changes(changes), sequential=True)


def decode_state_changes(data: bytes, replicas: Any) -> list[StateChange]:
    """The changes a change node holds; ``replicas(topic, index)`` gives each
    partition's replica set (the state JSON does not carry it), () when unknown."""
    changes = []
    for entry in _load(data)["partitions"]:
        topic, index, raw = entry["topic"], entry["partition"], entry["state"]
        changes.append(StateChange(topic, entry["topic_id"], index, PartitionState(
            leader=raw["leader"], leader_epoch=raw["leader_epoch"], isr=tuple(raw["isr"]),
            replicas=replicas(topic, index), partition_epoch=entry["partition_epoch"],
            controller_epoch=raw["controller_epoch"])))
    return changes


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": configs})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in _load(data).get("config", {}).items()}


# ---------------------------------------------------------------------- controller
def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id,
                  "timestamp": str(int(time.time() * 1000))})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


# ----------------------------------------------------------------- producer ids
@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    start: int
    end: int  # inclusive, as Kafka writes it

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id,
                      "block_start": str(self.start), "block_end": str(self.end)})

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        raw = _load(data)
        return cls(int(raw["broker"]), int(raw["block_start"]), int(raw["block_end"]))


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])
