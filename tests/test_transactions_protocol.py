"""Wire formats of transactions checked against kio (generated from Kafka's schemas):
the aborted transactions of a read_committed Fetch answer, and control markers."""

from __future__ import annotations

import pytest

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import decode_response
from gregor.protocol.control_record import encode_marker, is_commit
from gregor.protocol.fetch_response import FetchedPartition, encode_fetch_response
from gregor.protocol.record_batch import validate_batch
from gregor.protocol.record_codec import decode_records


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_answer_lists_aborted_transactions(version: int) -> None:
    records = b"x" * 70
    partitions = [
        FetchedPartition(0, 0, 50, 40, 0, records, aborted_transactions=[(7, 3), (9, 12)]),
        FetchedPartition(1, 0, 50, 50, 0, None),
    ]
    chunks = encode_fetch_response(version, 5, 0, 0, 0, [("t", partitions)])
    frame = b"".join(c if isinstance(c, bytes) else c.read() for c in chunks)
    correlation_id, body = decode_response(ApiKey.FETCH, version, frame[4:])
    assert correlation_id == 5
    first, second = body.responses[0].partitions
    assert first.last_stable_offset == 40
    assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [
        (7, 3), (9, 12)]
    assert first.records == records
    assert not second.aborted_transactions


@pytest.mark.parametrize("commit", [True, False])
def test_markers_are_control_batches_of_the_producer(commit: bool) -> None:
    marker = encode_marker(42, 3, commit, coordinator_epoch=7, timestamp=1000)
    header = validate_batch(marker)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert is_commit(marker) is commit
    (record,) = decode_records(marker)[1]
    assert record.key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
    assert record.value == b"\x00\x00\x00\x00\x00\x07"
