"""Unknown tagged fields are skipped, as Kafka's parser does, not refused."""

from __future__ import annotations

import struct

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import decode_request, encode_request

_CLIENT = "tags-test"
# Where header v2's tag section sits in a frame: size prefix, api key, version,
# correlation id, client id length and the client id itself.
_HEADER_TAGS = 4 + 8 + 2 + len(_CLIENT)


def _metadata_frame() -> bytes:
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    return encode_request(ApiKey.METADATA, 12, 7, _CLIENT, body)


def _decode(frame_with_prefix: bytes):
    return decode_request(frame_with_prefix[4:])


def _with_prefix(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_plain_request_decodes() -> None:
    header, body = _decode(_metadata_frame())
    assert header.correlation_id == 7
    assert [t.name for t in body.topics] == ["orders"]


def test_unknown_header_tag_is_skipped() -> None:
    frame = _metadata_frame()
    assert frame[_HEADER_TAGS] == 0
    tagged = frame[4:_HEADER_TAGS] + b"\x01\x09\x03abc" + frame[_HEADER_TAGS + 1:]
    header, body = _decode(_with_prefix(tagged))
    assert header.client_id == _CLIENT
    assert [t.name for t in body.topics] == ["orders"]
    assert body.allow_auto_topic_creation is False


def test_unknown_body_tags_are_skipped_at_every_level() -> None:
    frame = _metadata_frame()
    # The body ends: topic entry tags (0), allow_auto (0), include_ops (0), body tags (0).
    assert frame[-4:] == b"\x00\x00\x00\x00"
    tagged = frame[4:-4] + b"\x02\x05\x01z\x06\x00" + b"\x00\x00" + b"\x01\x07\x02hi"
    _, body = _decode(_with_prefix(tagged))
    assert [t.name for t in body.topics] == ["orders"]
    assert body.allow_auto_topic_creation is False
    assert body.include_topic_authorized_operations is False
