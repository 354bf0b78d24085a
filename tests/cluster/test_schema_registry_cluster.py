"""Two registries on a three-broker cluster: confluent-kafka's three serializers round
trip through replicated topics while the registries' primary is killed, then the broker
leading ``_schemas``; ids stay unique and increasing."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from harness import Cluster
from test_schema_registry_failover import primary_of
from test_schema_registry_serializers import (
    USER_AVRO,
    USER_JSON,
    framed_id,
    round_trip,
    user_message_class,
)

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.schemas.process import RegistryProcess

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    started = Cluster(zookeeper, Path(tmp_path_factory.mktemp("registry-cluster"))).start()
    yield started
    started.stop()


def test_serializers_through_failovers(cluster: Cluster) -> None:
    topics = {kind: f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("avro", "json", "proto")}
    for name in topics.values():  # replicated three times, so a broker's death loses none
        cluster.create_topic(name)
    instances = [RegistryProcess(cluster.bootstrap).start() for _ in range(2)]
    try:
        assert len(cluster.metadata().topics["_schemas"].partitions[0].replicas) == 3
        primary = primary_of(instances)
        survivor = next(i for i in instances if i is not primary)
        # Each client calls the instance that is not the primary: its writes are forwarded.
        client = SchemaRegistryClient({"url": survivor.url})
        users = [{"name": "ada", "age": 36}]
        topic = topics["avro"]
        raw, decoded = round_trip(cluster.bootstrap, topic, users,
                                  AvroSerializer(client, USER_AVRO), AvroDeserializer(client))
        assert decoded == users
        ids = [framed_id(raw[0])]

        primary.kill()
        client = SchemaRegistryClient({"url": survivor.url})
        topic = topics["json"]
        raw, decoded = round_trip(cluster.bootstrap, topic, users,
                                  JSONSerializer(USER_JSON, client),
                                  JSONDeserializer(USER_JSON, schema_registry_client=client))
        assert decoded == users
        ids.append(framed_id(raw[0]))

        leader = cluster.leader("_schemas")
        cluster.brokers[leader].kill()
        user_class = user_message_class(f"p{uuid.uuid4().hex[:8]}")
        topic = topics["proto"]
        raw, decoded = round_trip(
            ",".join(b.bootstrap for b in cluster.brokers.values() if b.proc is not None),
            topic, [user_class(name="ada", age=36)],
            ProtobufSerializer(user_class, client, {"use.deprecated.format": False}),
            ProtobufDeserializer(user_class, {"use.deprecated.format": False}))
        assert decoded == [user_class(name="ada", age=36)]
        ids.append(framed_id(raw[0]))
        assert ids == sorted(set(ids)), ids

        # The killed instance, started again, reads every schema back from the cluster.
        primary.start()
        subjects = json.dumps(primary.call("GET", "/subjects")[1])
        assert all(kind in subjects for kind in ("avro-", "json-", "proto-"))
    except BaseException:
        # What each instance logged (its elections, its group's errors) says which
        # failover a failed write waited for: it failed once in 14 runs at load 11 with
        # "no primary elected", and said no more.
        for number, instance in enumerate(instances):
            sys.stderr.write(f"registry {number} ({instance.url}):\n{''.join(instance.output)}")
        raise
    finally:
        for instance in instances:
            instance.stop()
