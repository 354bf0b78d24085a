"""Control records: the commit and abort markers that end a transaction in a partition.

A marker is a control batch (transactional and control attribute bits set) of the
producer's id and epoch holding one record. Its key says which marker it is
(version int16, type int16: 0 abort, 1 commit); its value is Kafka's
EndTransactionMarker (version int16, coordinator epoch int32). Markers are few
(one per partition and transaction), so reading one decodes that single record.
"""

from __future__ import annotations

import struct

from gregor.protocol.record_batch import InvalidRecordBatch
from gregor.protocol.record_codec import Record, decode_records, encode_batch

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_VERSION = 0


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int) -> bytes:
    """A control batch ending the producer's transaction, at offset 0 (the log stamps it)."""
    record = Record(offset=0, timestamp=timestamp,
                    key=_KEY.pack(_VERSION, COMMIT if commit else ABORT),
                    value=_VALUE.pack(_VERSION, coordinator_epoch))
    return encode_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                        is_transactional=True, is_control=True)


def is_commit(batch: bytes | bytearray | memoryview) -> bool:
    """Whether a control batch is a commit marker (else an abort marker)."""
    return read_marker(batch)[0]


def read_marker(batch: bytes | bytearray | memoryview) -> tuple[bool, int]:
    """Whether a control batch is a commit marker, and the coordinator epoch it carries
    (-1 if it has none)."""
    _, records = decode_records(batch)
    if not records or records[0].key is None:
        raise InvalidRecordBatch("control batch without a control record key")
    value = records[0].value
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size \
        else -1
    return is_commit_key(records[0].key), epoch


def is_commit_key(key: bytes) -> bool:
    """Whether a control record's key is a commit marker's (else an abort marker's)."""
    if len(key) < _KEY.size:
        raise InvalidRecordBatch("control record key too short")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise InvalidRecordBatch(f"unknown control record type {kind}")
    return kind == COMMIT
