"""One Kafka request over a plain socket, for the commands whose API librdkafka lacks
(DescribeTransactions, DescribeProducers, the partition reassignment APIs)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gregor.cli.errors import CliError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import decode_response, encode_request

_SIZE = struct.Struct(">i")
_TIMEOUT_S = 15.0


def request(addresses: str, api_key: ApiKey, version: int, body: Any, client_id: str,
            raw: bool = False, timeout_s: float = _TIMEOUT_S) -> Any:
    """The decoded answer (with ``raw``, the response frame as it came) of the first of
    ``addresses`` (comma-separated, as a bootstrap list) that answers."""
    failures = []
    for address in addresses.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
                sock.sendall(encode_request(api_key, version, 1, client_id, body))
                (size,) = _SIZE.unpack(_read(sock, 4))
                frame = _read(sock, size)
                return frame if raw else decode_response(api_key, version, frame)[1]
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {exc or type(exc).__name__}")
    raise CliError(f"{api_key.name} failed: {'; '.join(failures)}")


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data
