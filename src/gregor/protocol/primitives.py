"""Kafka's wire primitives in both of its encodings, for the hand-written codecs.

Classic versions prefix arrays with an int32 count and strings with an int16
length; flexible versions (KIP-482) use an unsigned varint of the length plus one
(0 for null) and end each structure with a tagged-field section. The encoders that
bypass kio (Fetch, Metadata and Produce answers, the follower's Fetch) write their
fields with these, so each version's choice is made in one place.
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
