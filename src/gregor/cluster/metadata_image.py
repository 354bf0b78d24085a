"""MetadataImage: topics, their ids, partition assignments and configs, persisted locally.

In Kafka this lives in ZooKeeper or the KRaft metadata log; a single node keeps
it in one JSON file in the first log directory, replaced atomically on change.
The cluster controller (ZooKeeper-elected) will become its writer later.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

METADATA_FILE = "gregor-metadata.json"


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)


@dataclass
class TopicMetadata:
    name: str
    topic_id: str
    partitions: list[PartitionAssignment]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


@dataclass
class MetadataImage:
    path: Path
    cluster_id: str
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    next_producer_id: int = 1000

    @classmethod
    def load(cls, log_dir: Path) -> MetadataImage:
        path = log_dir / METADATA_FILE
        if not path.exists():
            image = cls(path, cluster_id=_new_cluster_id())
            image.save()
            return image
        raw = json.loads(path.read_text())
        topics = {
            name: TopicMetadata(
                name=name, topic_id=t["topic_id"], configs=t.get("configs", {}),
                internal=t.get("internal", False),
                partitions=[PartitionAssignment(**p) for p in t["partitions"]])
            for name, t in raw["topics"].items()
        }
        return cls(path, raw["cluster_id"], topics, raw.get("next_producer_id", 1000))

    def save(self) -> None:
        payload = {
            "cluster_id": self.cluster_id,
            "next_producer_id": self.next_producer_id,
            "topics": {name: {k: v for k, v in asdict(t).items() if k != "name"}
                       for name, t in self.topics.items()},
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as handle:
            json.dump(payload, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def allocate_producer_id(self) -> int:
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        self.save()
        return producer_id


def _new_cluster_id() -> str:
    """Kafka cluster ids are 16 random bytes in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
