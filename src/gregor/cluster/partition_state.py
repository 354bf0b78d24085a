"""PartitionState: who leads a partition, at which epoch, and which replicas are in sync.

This is Kafka's LeaderAndIsr: the record the controller writes (in ZooKeeper, at
``/brokers/topics/<topic>/partitions/<p>/state``) and every broker applies. Two
counters order its versions:

- ``leader_epoch`` grows with every change of leader. Replicas stamp it on the
  batches they append, truncate by it when they return (KIP-101), and clients
  send it so a stale leader or follower is detected (FENCED_LEADER_EPOCH).
- ``partition_epoch`` grows with every change at all (leader or ISR). It is the
  version of the state znode, so a write conditioned on it fails if anyone wrote
  in between: a leader whose view is stale cannot shrink or expand the ISR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    controller_epoch: int = 0

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def with_isr(self, isr: tuple[int, ...]) -> PartitionState:
        """The same leadership with another ISR: what a leader asks the controller for."""
        return replace(self, isr=isr)

    def with_partition_epoch(self, partition_epoch: int) -> PartitionState:
        """This state as its znode holds it at version ``partition_epoch``. Built
        directly: ``dataclasses.replace`` costs twice as much, and a controller moving
        10,000 partitions, or a leader writing their ISRs, makes one for each."""
        return PartitionState(self.leader, self.leader_epoch, self.isr, self.replicas,
                              partition_epoch, self.controller_epoch)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition being moved (KIP-455): until the target replicas are in sync, its
    replica set is the target's and the original's together; ``adding`` are the
    target's new ones, ``removing`` the original's that leave at the end."""

    adding: tuple[int, ...]
    removing: tuple[int, ...]

    def target(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(r for r in replicas if r not in self.removing)

    def original(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(r for r in replicas if r not in self.adding)
