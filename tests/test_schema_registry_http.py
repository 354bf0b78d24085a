"""The registry's HTTP server (gregor.schemas.serving) as clients meet it on the wire:
the calls answered on the spot give the app's answers, in the order asked, each
answer in one TCP segment; against a real ``gregor schema-registry`` process."""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest

from gregor.schemas.process import RegistryProcess

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
_TCPI_DATA_SEGS_IN = 152
"""Offset of ``tcpi_data_segs_in`` in Linux's ``struct tcp_info`` (since 4.6)."""


def _schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": "n", "type": "long"}]})


def _request(method: str, path: str, body: dict | None = None, version: str = "1.1",
             headers: str = "") -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    length = f"Content-Type: {MEDIA_TYPE}\r\nContent-Length: {len(data)}\r\n" if data else ""
    return (f"{method} {path} HTTP/{version}\r\nHost: registry\r\n{length}{headers}\r\n"
            .encode() + data)


class _Connection:
    def __init__(self, registry: RegistryProcess) -> None:
        host, port = registry.listen.rsplit(":", 1)
        self.socket = socket.create_connection((host, int(port)), timeout=30)
        self.buffer = b""

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer: status, headers (lower-case names), body."""
        while b"\r\n\r\n" not in self.buffer:
            self._receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, body

    def data_segments_received(self) -> int:
        info = self.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        return struct.unpack_from("I", info, _TCPI_DATA_SEGS_IN)[0]

    def _receive(self) -> None:
        data = self.socket.recv(65536)
        if not data:
            raise ConnectionError("the registry closed the connection")
        self.buffer += data


@pytest.fixture
def connection(registry: RegistryProcess) -> Iterator[_Connection]:
    opened = _Connection(registry)
    yield opened
    opened.socket.close()


@pytest.fixture
def registered(registry: RegistryProcess) -> tuple[str, str, int]:
    """A subject, the schema text it holds as version 1, and its id."""
    subject = f"http-{uuid.uuid4().hex[:10]}-value"
    text = _schema(f"R{uuid.uuid4().hex[:8]}")
    status, body = registry.call("POST", f"/subjects/{subject}/versions", {"schema": text})
    assert status == 200
    return subject, text, body["id"]


def test_each_answer_leaves_in_one_segment(connection: _Connection,
                                           registered: tuple[str, str, int]) -> None:
    """An answer written in two sends (head, then body) reaches the client as two
    segments and wakes it twice; on the spot (an id) or from the app (the subjects),
    each answer is one."""
    subject, text, schema_id = registered
    for request in (_request("GET", f"/schemas/ids/{schema_id}"),
                    _request("POST", f"/subjects/{subject}", {"schema": text}),
                    _request("GET", "/subjects"),
                    _request("GET", f"/subjects/{subject}/versions/latest")):
        before = connection.data_segments_received()
        connection.socket.sendall(request)
        status, _, _ = connection.answer()
        assert status == 200
        assert connection.data_segments_received() - before == 1, request


def test_answers_on_the_spot_are_the_apps(registry: RegistryProcess, connection: _Connection,
                                          registered: tuple[str, str, int]) -> None:
    """HTTP/1.0 requests always go to the app (on a connection closed after the
    answer): the answers are the same, byte for byte, for an id, a lookup found and
    not found, and malformed ones."""
    subject, text, schema_id = registered
    for method, path, body in (("GET", f"/schemas/ids/{schema_id}", None),
                               ("GET", f"/schemas/ids/{schema_id}?format=serialized", None),
                               ("GET", "/schemas/ids/2147483000", None),
                               ("GET", "/schemas/ids/x", None),
                               ("POST", f"/subjects/{subject}", {"schema": text}),
                               ("POST", f"/subjects/{subject}?normalize=true", {"schema": text}),
                               ("POST", f"/subjects/{subject}", {"schema": _schema("Other")}),
                               ("POST", f"/subjects/{subject}", {"schema": "{"}),
                               ("POST", "/subjects/no-such-subject", {"schema": text}),
                               ("POST", f"/subjects/{subject}", {"schemaType": "XML",
                                                                 "schema": text})):
        connection.socket.sendall(_request(method, path, body))
        on_the_spot = connection.answer()
        once = _Connection(registry)
        once.socket.sendall(_request(method, path, body, version="1.0"))
        from_the_app = once.answer()
        once.socket.close()
        assert on_the_spot[0] == from_the_app[0], path
        assert on_the_spot[1]["content-type"] == from_the_app[1]["content-type"] == MEDIA_TYPE
        assert on_the_spot[2] == from_the_app[2], path
    connection.socket.sendall(_request("GET", f"/schemas/ids/{schema_id}"))
    status, _, answer = connection.answer()
    assert status == 200 and json.loads(answer) == {"schema": json.dumps(
        json.loads(text), separators=(",", ":"))}


def test_pipelined_requests_are_answered_in_order(registry: RegistryProcess,
                                                  connection: _Connection,
                                                  registered: tuple[str, str, int]) -> None:
    """Requests sent together, some answered on the spot and some by the app (a write
    that waits for the topic among them), are answered in the order they came."""
    subject, text, schema_id = registered
    newer = json.dumps({"type": "record", "name": json.loads(text)["name"],
                        "fields": [{"name": "n", "type": "long"},
                                   {"name": "m", "type": "long", "default": 0}]})
    connection.socket.sendall(b"".join([
        _request("GET", f"/schemas/ids/{schema_id}"),
        _request("POST", f"/subjects/{subject}/versions", {"schema": newer}),
        _request("GET", f"/schemas/ids/{schema_id}"),
        _request("POST", f"/subjects/{subject}", {"schema": newer}),
        _request("GET", "/schemas/ids/2147483000"),
        _request("POST", f"/subjects/{subject}", {"schema": text}),
    ]))
    answers = [connection.answer() for _ in range(6)]
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 404, 200]
    new_id = json.loads(answers[1][2])["id"]
    assert json.loads(answers[0][2]) == json.loads(answers[2][2])
    assert json.loads(answers[3][2])["version"] == 2 and json.loads(answers[3][2])["id"] == new_id
    assert json.loads(answers[4][2])["error_code"] == 40403
    assert json.loads(answers[5][2])["version"] == 1


def test_a_client_expecting_100_continue_gets_it(connection: _Connection,
                                                 registered: tuple[str, str, int]) -> None:
    """Only the app sends "100 Continue": such a request is not held for the body
    its client waits to send."""
    subject, text, _ = registered
    body = json.dumps({"schema": text}).encode()
    connection.socket.sendall(
        f"POST /subjects/{subject} HTTP/1.1\r\nHost: registry\r\nContent-Type: {MEDIA_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
    status, _, _ = connection.answer()
    assert status == 100
    connection.socket.sendall(body)
    status, _, answer = connection.answer()
    assert status == 200 and json.loads(answer)["version"] == 1


def test_a_get_with_more_than_a_question_takes_the_parsers_path(
        registry: RegistryProcess, connection: _Connection,
        registered: tuple[str, str, int]) -> None:
    """A bodiless GET that arrives whole is answered before the parser sees it, unless a
    header says it is more: a body to follow (read as the body, not as the next
    request), or ``Connection: close`` (the connection closes after the answer)."""
    _, _, schema_id = registered
    head = _request("GET", f"/schemas/ids/{schema_id}", headers="Content-Length: 5\r\n")
    connection.socket.sendall(head)
    time.sleep(0.5)  # the head alone in the registry's first read
    connection.socket.sendall(b"hello" + _request("GET", f"/schemas/ids/{schema_id}"))
    assert [connection.answer()[0] for _ in range(2)] == [200, 200]

    closing = _Connection(registry)
    closing.socket.sendall(_request("GET", f"/schemas/ids/{schema_id}",
                                    headers="Connection: close\r\n"))
    status, headers, _ = closing.answer()
    assert status == 200 and headers.get("connection") == "close"
    assert closing.socket.recv(1) == b""
    closing.socket.close()


KEEP_ALIVE_S = 5
"""uvicorn's keep-alive timeout, which the registry keeps."""


def test_keep_alive_counts_from_the_last_answer_on_the_spot(
        connection: _Connection, registered: tuple[str, str, int]) -> None:
    """Answers given before the parser arm uvicorn's keep-alive timer once rather than
    for every request: a connection asking all along outlives the timeout its first
    answer armed, and one left idle is closed after it."""
    _, _, schema_id = registered
    asking_until = time.monotonic() + KEEP_ALIVE_S + 1.5
    while time.monotonic() < asking_until:
        connection.socket.sendall(_request("GET", f"/schemas/ids/{schema_id}"))
        assert connection.answer()[0] == 200
        time.sleep(0.25)
    connection.socket.settimeout(KEEP_ALIVE_S + 5)
    idle_from = time.monotonic()
    assert connection.socket.recv(1) == b""
    assert time.monotonic() - idle_from > KEEP_ALIVE_S - 1
