"""Compression codecs of record batch v2, in the exact framings Kafka clients interoperate on.

The broker stores and serves compressed batches untouched; these codecs are for the
code that has to look inside them (log compaction, key validation on compacted
topics, command-line tools, tests). What matters is the framing around each codec,
because each client library reads only some variants:

* snappy -- the Java client wraps snappy in the xerial (snappy-java) stream framing;
  librdkafka writes raw snappy for v2 batches. Every client reads both, so we read
  both and write xerial, which is what Java and kafka-python write.
* lz4 -- the standard LZ4 frame format, but Java's reader decompresses each block
  on its own and rejects frames whose blocks are linked, which is lz4.frame's default.
* zstd -- standard frames; librdkafka and zstd-jni streams may omit the content
  size, so decompression streams instead of trusting the frame header.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard


class CompressionType(IntEnum):
    """The codec id stored in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Compressed data that its codec cannot decode: corrupt, truncated or mislabelled."""


# xerial's SnappyOutputStream header: magic, then format version and the oldest
# reader version that can decode it (both 1 in every known writer).
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's default block size; Kafka's Java producer does not change it.
_XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# Kafka's Java client uses java.util.zip's default level (6), not gzip's 9, which
# costs much more CPU for a few percent of size.
_GZIP_LEVEL = 6
# zstd's own default level, which is also Kafka's (compression.zstd.level=3).
_ZSTD_LEVEL = 3


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` for a batch whose attributes name ``codec``."""
    match CompressionType(codec):
        case CompressionType.NONE:
            return bytes(data)
        case CompressionType.GZIP:
            # mtime=0 keeps the output a pure function of the input, so rewriting
            # an unchanged batch (e.g. during compaction) reproduces it exactly.
            return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
        case CompressionType.SNAPPY:
            return _xerial_compress(memoryview(data))
        case CompressionType.LZ4:
            return lz4.frame.compress(data, block_linked=False)
        case CompressionType.ZSTD:
            return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress a batch's records section; raise :class:`CompressionError` if it is bad.

    Codec libraries signal bad input with unrelated exception types (OSError,
    RuntimeError, their own errors); callers validating untrusted batches only
    need to know the data is unreadable.
    """
    codec = CompressionType(codec)
    try:
        match codec:
            case CompressionType.NONE:
                return bytes(data)
            case CompressionType.GZIP:
                return gzip.decompress(data)
            case CompressionType.SNAPPY:
                return _snappy_decompress(memoryview(data))
            case CompressionType.LZ4:
                return lz4.frame.decompress(data)
            case CompressionType.ZSTD:
                return _zstd_decompress(data)
    except (OSError, EOFError, zlib.error, RuntimeError, cramjam.DecompressionError,
            zstandard.ZstdError, struct.error) as exc:
        raise CompressionError(f"cannot decompress {codec.name} data: {exc}") from exc


def _xerial_compress(data: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: memoryview) -> bytes:
    # Only the magic identifies xerial framing: some writers (redpanda) store the
    # version fields little-endian, so they are not checked.
    if len(data) < len(_XERIAL_HEADER) or data[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    parts = []
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > end:
            raise CompressionError("xerial snappy block runs past the end of the data")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(parts)


def _zstd_decompress(data: bytes | bytearray | memoryview) -> bytes:
    # One decompressobj per frame: it stops at the end of a frame (leaving the rest
    # in unused_data) and, unlike ZstdDecompressor.decompress, needs no content size.
    parts = []
    remaining = bytes(data)
    while remaining:
        frame = zstandard.ZstdDecompressor().decompressobj()
        parts.append(frame.decompress(remaining))
        if not frame.eof:
            raise CompressionError("zstd data ends inside a frame")
        remaining = frame.unused_data
    return b"".join(parts)
