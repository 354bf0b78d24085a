"""Tools for tests that misbehave towards a live broker.

``RawConnection`` adds to the shared ``WireConnection`` what no real client does:
sending arbitrary bytes (truncated frames, corrupted batches, absurd sizes) and
noticing that the broker closed the connection. ``BrokerLog`` reads what the
broker logged meanwhile, because surviving bad input also means not spilling
tracebacks or flooding the log.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

from clients import WireConnection

from gregor.protocol.codec import encode_request

_SIZE = struct.Struct(">i")


class RawConnection(WireConnection):
    def frame(self, api_key: int, version: int, body: Any) -> bytes:
        """A complete request frame with the next correlation id, to mutate before sending."""
        self.correlation_id += 1
        return encode_request(api_key, version, self.correlation_id, "gregor-tests", body)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """The next response frame, without its size prefix."""
        (size,) = _SIZE.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def closed_by_broker(self) -> bool:
        """Wait (up to the socket timeout) for the broker to close this connection.

        False if the broker answered instead, or kept the connection open.
        """
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


class BrokerLog:
    """What a broker process wrote to its log file after this object was created."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = path.stat().st_size if path.exists() else 0

    def text(self) -> str:
        with open(self.path, "rb") as file:
            file.seek(self.start)
            return file.read().decode("utf-8", "replace")

    def count(self, needle: str) -> int:
        return self.text().count(needle)

    def wait_for(self, needle: str, timeout: float = 5.0) -> bool:
        """Whether ``needle`` appears within ``timeout`` (log lines land asynchronously)."""
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True
