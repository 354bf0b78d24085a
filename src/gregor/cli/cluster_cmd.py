"""``gregor cluster describe``: the brokers, the controller, and partitions needing attention.

Like ``kafka-topics --describe --under-replicated-partitions`` and
``--unavailable-partitions`` together with ``kafka-broker-api-versions``' broker
list: what an operator looks at first when a broker is down.
"""

from __future__ import annotations

import argparse

from confluent_kafka.admin import ClusterMetadata

from gregor.cli import reassign_cmd
from gregor.cli.client_config import add_client_arguments, described_cluster
from gregor.cli.topics_cmd import partition_row

_DESCRIBE_TIMEOUT_S = 10.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="brokers, controller, unhealthy partitions")
    actions = cluster.add_subparsers(dest="action", required=True)
    describe = actions.add_parser(
        "describe", help="brokers (id, address, rack), the controller, and under-replicated "
                         "and offline partitions")
    add_client_arguments(describe)
    describe.set_defaults(run=run_describe)
    reassign_cmd.add_actions(actions)


def run_describe(args: argparse.Namespace) -> int:
    metadata, described = described_cluster(args, _DESCRIBE_TIMEOUT_S)
    controller = described.controller.id if described.controller is not None else -1
    print(f"ClusterId: {described.cluster_id}\tController: {controller}")
    for node in sorted(described.nodes, key=lambda n: n.id):
        role = "\tcontroller" if node.id == controller else ""
        print(f"Broker: {node.id}\tAddress: {node.host}:{node.port}\t"
              f"Rack: {node.rack or '-'}{role}")
    under, offline = unhealthy_partitions(metadata)
    for title, partitions in (("UnderReplicatedPartitions", under),
                              ("OfflinePartitions", offline)):
        print(f"{title}: {len(partitions)}")
        for name, index in partitions:
            print(partition_row(metadata, name, index))
    return 0


def unhealthy_partitions(metadata: ClusterMetadata
                         ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(under-replicated, offline) partitions as (topic, partition), in order: offline
    ones have no leader, under-replicated ones a leader but an ISR short of a replica."""
    under, offline = [], []
    for name, topic in sorted(metadata.topics.items()):
        for index, partition in sorted(topic.partitions.items()):
            if partition.leader < 0:
                offline.append((name, index))
            elif len(partition.isrs) < len(partition.replicas):
                under.append((name, index))
    return under, offline
