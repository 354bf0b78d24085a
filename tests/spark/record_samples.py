"""Random record batches for the two record decoders' tests (the Python/C scanner's in
test_record_scan.py and the JVM reader's in test_jvm_partition_reader.py), so that both
are held to the same records."""

from __future__ import annotations

import random

from gregor.protocol.compression import CompressionType
from gregor.protocol.record_codec import Record, encode_batch


def random_records(rng: random.Random, count: int, base: int) -> list[Record]:
    """Keys, values and header values null or not, empty or not, and offset gaps."""
    def blob(max_size: int) -> bytes | None:
        return None if rng.random() < 0.2 else rng.randbytes(rng.randrange(max_size))

    records = []
    offset = base
    for _ in range(count):
        headers = [
            (rng.choice(["", "k", "ключ", "trace-id"]), blob(20))
            for _ in range(rng.choice([0, 0, 1, 3]))
        ]
        records.append(Record(offset, 1_700_000_000_000 + rng.randrange(-5000, 5000),
                              blob(300), blob(3000), headers))
        offset += rng.choice([1, 1, 1, 2, 7])  # gaps, as compaction leaves them
    return records


def random_batches(codec: CompressionType, base: int = 1000) -> tuple[list[bytes], int]:
    """Five batches of random records from ``base`` on, the third with LogAppendTime, and
    the offset after the last record."""
    rng = random.Random(codec)
    batches = []
    for index in range(5):
        records = random_records(rng, rng.randrange(1, 60), base)
        batches.append(encode_batch(records, base_offset=base, compression=codec,
                                    timestamp_type_log_append=index == 2))
        base = records[-1].offset + 1
    return batches, base
