"""Kafka's wire primitives in both of its encodings, for the hand-written codecs.

Classic versions prefix arrays with an int32 count and strings with an int16
length; flexible versions (KIP-482) use an unsigned varint of the length plus one
(0 for null) and end each structure with a tagged-field section. The codecs that
bypass kio (Fetch, Metadata and Produce answers, the follower's Fetch, Produce
requests) write their fields with :class:`Encoding` and read them with
:class:`Reader`, so each version's choice is made in one place.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gregor.protocol.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class Encoding:
    """The primitives of one encoding: ``Encoding(flexible=version >= first_flexible)``."""

    __slots__ = ("flexible",)

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible

    def array_length(self, n: int) -> bytes:
        """An array's count (-1: a null array)."""
        return encode_uvarint(n + 1) if self.flexible else _I32.pack(n)

    def string(self, value: str | None) -> bytes:
        if value is None:
            return b"\x00" if self.flexible else _I16.pack(-1)
        raw = value.encode()
        return (encode_uvarint(len(raw) + 1) if self.flexible else _I16.pack(len(raw))) + raw

    def int32s(self, values: Sequence[int]) -> bytes:
        return self.array_length(len(values)) + struct.pack(f">{len(values)}i", *values)

    @property
    def tags(self) -> bytes:
        """An empty tagged-field section where the encoding has them."""
        return b"\x00" if self.flexible else b""


CLASSIC = Encoding(False)
COMPACT = Encoding(True)


class Reader:
    """A cursor over a received frame; every read checks the frame holds what it names
    (``struct.error``, ``IndexError`` or ``ValueError`` otherwise), so a count or a
    length a peer made up fails at the first byte it would read past the end."""

    __slots__ = ("view", "at")

    def __init__(self, frame: bytes | bytearray | memoryview) -> None:
        self.view = memoryview(frame)
        self.at = 0

    def unpack(self, layout: struct.Struct) -> tuple:
        values = layout.unpack_from(self.view, self.at)
        self.at += layout.size
        return values

    def uvarint(self) -> int:
        value = shift = 0
        view = self.view
        while True:
            byte = view[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")

    def take(self, size: int) -> memoryview:
        if size < 0 or self.at + size > len(self.view):
            raise ValueError(f"a field of {size} bytes runs past the frame")
        taken = self.view[self.at:self.at + size]
        self.at += size
        return taken

    def classic_string(self) -> str | None:
        """A string with an int16 length (-1: null), as request headers carry the
        client id in every header version."""
        (size,) = self.unpack(_I16)
        return None if size < 0 else str(self.take(size), "utf-8")

    def compact_string(self) -> str:
        return str(self.take(self.uvarint() - 1), "utf-8")

    def tags(self) -> dict[int, memoryview]:
        return {self.uvarint(): self.take(self.uvarint()) for _ in range(self.uvarint())}
