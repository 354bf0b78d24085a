"""The controller's decisions, as pure functions: where replicas go and who leads.

Nothing here touches ZooKeeper or the clock, so every rule that decides whether
an acknowledged record can be lost has plain deterministic tests. The rules are
Kafka's (``AdminUtils.assignReplicasToBrokers`` and ``PartitionLeaderElectionAlgorithms``):

- a new leader is the first replica in assignment order that is live and in the
  ISR, so the preferred (first) replica leads whenever it can;
- with ``unclean.leader.election.enable`` and no live ISR member, the first live
  replica leads and the ISR restarts from it alone (offsets may be lost);
- without it the partition stays offline until an ISR member returns;
- a broker shutting down cleanly hands its leaderships to another ISR member;
- asked (ElectLeaders), the controller gives leadership back to the preferred replica
  if it is live and in sync, or, for an unclean election, to the first live replica of
  a partition whose leader is gone.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from gregor.cluster.partition_state import NO_LEADER, PartitionState
from gregor.protocol.errors import ErrorCode

# ElectLeaders' election types.
PREFERRED = 0
UNCLEAN = 1


class AssignmentError(ValueError):
    """More replicas were asked for than there are brokers."""


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _arranged_by_rack(racks: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so that consecutive ones are on different racks where possible."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker] or "", []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[int] = []
    while any(queues):
        for queue in queues:
            if queue:
                arranged.append(queue.pop(0))
    return arranged


def assign_replicas(partitions: int, replication_factor: int,
                    racks: Mapping[int, str | None], *, first_partition: int = 0,
                    rng: random.Random | None = None) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` new partitions over the brokers in ``racks``.

    As in Kafka, leaders (first replicas) go round-robin from a random start, the
    followers are shifted so that one broker's leaderships are followed by many
    brokers, and no rack gets a second replica of a partition before every rack has one.
    """
    brokers = _arranged_by_rack(racks)
    n = len(brokers)
    if replication_factor > n:
        raise AssignmentError(f"replication factor {replication_factor} is larger than the "
                              f"{n} available broker(s)")
    rng = rng or random.Random()
    start = rng.randrange(n)
    shift = rng.randrange(n)
    num_racks = len({racks[b] or "" for b in brokers})
    result = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        used_racks = {racks[brokers[first]] or ""}
        k = 0
        while len(replicas) < replication_factor:
            candidate = brokers[_replica_index(first, shift, k, n)] if n > 1 else brokers[0]
            rack = racks[candidate] or ""
            k += 1
            if candidate in replicas:
                continue
            if rack in used_racks and len(used_racks) < num_racks:
                continue
            replicas.append(candidate)
            used_racks.add(rack)
        result.append(tuple(replicas))
    return result


@dataclass(frozen=True, slots=True)
class Election:
    """A new partition state, and whether it was unclean (records may be lost)."""

    state: PartitionState
    unclean: bool = False


def initial_state(replicas: tuple[int, ...], live: Collection[int],
                  controller_epoch: int) -> PartitionState:
    """A new partition: the live replicas are in sync (all empty), the first leads."""
    isr = tuple(r for r in replicas if r in live)
    return PartitionState(leader=isr[0] if isr else NO_LEADER, leader_epoch=0, isr=isr,
                          replicas=replicas, controller_epoch=controller_epoch)


def elect_offline(state: PartitionState, live: Collection[int], *, unclean_allowed: bool,
                  controller_epoch: int) -> Election | None:
    """Kafka's offline-partition election, run when the leader's broker is gone.

    Returns None when nothing changes: the leader is alive, or no replica may lead
    (then the partition stays offline, and clients get LEADER_NOT_AVAILABLE).
    """
    if state.leader in live:
        return None
    for replica in state.replicas:
        if replica in live and replica in state.isr:
            isr = tuple(r for r in state.isr if r in live)
            return Election(_led_by(state, replica, isr, controller_epoch))
    if unclean_allowed:
        for replica in state.replicas:
            if replica in live:
                return Election(_led_by(state, replica, (replica,), controller_epoch),
                                unclean=True)
    if state.leader == NO_LEADER:
        return None
    # Nobody may lead: the partition goes offline, with its ISR kept as it was so the
    # first of them to return takes over with every acknowledged record.
    return Election(_led_by(state, NO_LEADER, state.isr, controller_epoch))


def elect_preferred(state: PartitionState, live: Collection[int],
                    controller_epoch: int) -> Election | None:
    """Give leadership back to the first replica if it is live, in sync and not leading."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return Election(_led_by(state, preferred, state.isr, controller_epoch))


def elect_on_request(state: PartitionState, live: Collection[int], election_type: int,
                     controller_epoch: int) -> Election | ErrorCode:
    """An ElectLeaders election for one partition, or why there is none (Kafka's
    errors): a partition already led by its preferred replica, or, unclean, led at all,
    needs none; otherwise its preferred replica, or for an unclean election any live
    replica, must be able to lead."""
    if election_type == PREFERRED:
        if state.leader == state.replicas[0]:
            return ErrorCode.election_not_needed
        return (elect_preferred(state, live, controller_epoch)
                or ErrorCode.preferred_leader_not_available)
    if state.leader in live:
        return ErrorCode.election_not_needed
    decided = elect_offline(state, live, unclean_allowed=True, controller_epoch=controller_epoch)
    if decided is None or decided.state.leader == NO_LEADER:
        return ErrorCode.eligible_leaders_not_available
    return decided


def elect_for_shutdown(state: PartitionState, live: Collection[int], shutting_down: int,
                       controller_epoch: int) -> Election | None:
    """Move leadership off ``shutting_down`` (controlled shutdown) and drop it from the ISR.

    None if it does not lead, or if no other ISR member is live (then it keeps leading
    until it stops, as in Kafka, rather than taking the partition offline early).
    """
    isr = tuple(r for r in state.isr if r != shutting_down)
    if state.leader != shutting_down:
        if isr == state.isr or len(isr) == 0:
            return None
        return Election(replace(state, isr=isr, controller_epoch=controller_epoch))
    for replica in state.replicas:
        if replica != shutting_down and replica in live and replica in isr:
            return Election(_led_by(state, replica, isr, controller_epoch))
    return None


def without_replicas(state: PartitionState, gone: Collection[int],
                     controller_epoch: int) -> PartitionState | None:
    """Drop dead followers from the ISR (the leader stays); None if none were in it.

    The last ISR member is never removed: it is the one that must lead again.
    """
    isr = tuple(r for r in state.isr if r not in gone or r == state.leader)
    if isr == state.isr or not isr:
        return None
    return replace(state, isr=isr, controller_epoch=controller_epoch)


def _led_by(state: PartitionState, leader: int, isr: tuple[int, ...],
            controller_epoch: int) -> PartitionState:
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                   controller_epoch=controller_epoch)
