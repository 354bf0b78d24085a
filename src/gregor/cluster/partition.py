"""Partition: one replica of a topic-partition, with leader epoch, ISR and high watermark.

Even on a single node every partition is modelled as a replica set, so that
replication plugs in without reshaping the data path: the leader appends, the
high watermark advances to the smallest log end offset among in-sync replicas,
and consumers only ever read below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendResult, Log, LogAppendError


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    local_broker_id: int
    leader_id: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0
    # Log end offsets reported by followers, keyed by broker id (the leader's own is its log's).
    follower_end_offsets: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A checkpointed high watermark can never exceed what survived on disk.
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset),
                                  self.log.log_end_offset)
        self.maybe_increment_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append_as_leader(self, records: bytes, required_acks: int) -> AppendResult:
        if not self.is_leader:
            raise LogAppendError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.local_broker_id} does not lead {self.topic}-{self.index}")
        min_isr = self.log.config["min.insync.replicas"]
        if required_acks == -1 and len(self.isr) < min_isr:
            raise LogAppendError(ErrorCode.not_enough_replicas,
                                 f"ISR {self.isr} is smaller than min.insync.replicas {min_isr}")
        result = self.log.append_as_leader(records, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return result

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW to the smallest log end offset across the ISR; True if it moved."""
        ends = [self.log.log_end_offset if broker == self.local_broker_id
                else self.follower_end_offsets.get(broker, 0) for broker in self.isr]
        candidate = min(ends) if ends else self.log.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def acks_satisfied(self, required_offset: int) -> bool:
        """Whether an acks=all write ending before ``required_offset`` is replicated."""
        return self.high_watermark >= required_offset
