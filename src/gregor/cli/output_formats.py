"""How ``gregor consume`` prints a record: text, json, kv (logfmt) or raw.

Keys, values and headers are arbitrary bytes. ``raw`` writes them untouched;
every other format must stay readable and unambiguous, so bytes that are not
UTF-8 are escaped (``\\xNN``) or, in JSON, carried as base64 with a marker.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

FORMATS = ("text", "json", "kv", "raw")
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}
_LOGFMT_BARE = re.compile(r"[^\s\"=\\]+")
_LOGFMT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

Formatter = Callable[[Message], bytes]
Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class TextFields:
    """What the text format prints before the value (kafka-console-consumer's print.* options)."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    headers: bool = False
    key: bool = False


def formatter(name: str, fields: TextFields) -> Formatter:
    if name == "text":
        return lambda message: _text_line(message, fields)
    return {"json": _json_line, "kv": _logfmt_line, "raw": _raw_line}[name]


def _timestamp(message: Message) -> tuple[str | None, int | None]:
    kind, value = message.timestamp()
    name = _TIMESTAMP_TYPES.get(kind)
    return (name, value) if name else (None, None)


def consumed_headers(message: Message) -> Headers:
    """A consumed record's headers, in order (empty when it has none).

    confluent-kafka's stubs give ``Message.headers()`` the type of what ``produce()``
    accepts (a dict, or str values too); librdkafka hands a consumer (name, bytes or
    None) pairs.
    """
    return cast(Headers, message.headers() or [])


def _readable(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _text_line(message: Message, fields: TextFields) -> bytes:
    """Kafka's DefaultMessageFormatter layout: tab-separated, optional fields first."""
    parts = []
    if fields.timestamp:
        kind, value = _timestamp(message)
        parts.append(f"{kind}:{value}" if kind else "NO_TIMESTAMP")
    if fields.partition:
        parts.append(f"Partition:{message.partition()}")
    if fields.offset:
        parts.append(f"Offset:{message.offset()}")
    if fields.headers:
        headers = consumed_headers(message)
        parts.append(",".join(f"{name}:{_readable(value)}" for name, value in headers)
                     if headers else "NO_HEADERS")
    if fields.key:
        parts.append(_readable(message.key()))
    parts.append(_readable(message.value()))
    return ("\t".join(parts) + "\n").encode("utf-8")


def _json_bytes(target: dict[str, Any], field: str, data: bytes | None) -> None:
    """Set ``field`` to the UTF-8 text, or to base64 plus ``<field>_encoding: base64``."""
    if data is None:
        target[field] = None
        return
    try:
        target[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        target[field] = base64.b64encode(data).decode("ascii")
        target[f"{field}_encoding"] = "base64"


def _json_line(message: Message) -> bytes:
    kind, timestamp = _timestamp(message)
    record: dict[str, Any] = {"topic": message.topic(), "partition": message.partition(),
                              "offset": message.offset(), "timestamp": timestamp,
                              "timestamp_type": kind}
    _json_bytes(record, "key", message.key())
    _json_bytes(record, "value", message.value())
    headers = []
    for name, value in consumed_headers(message):
        header: dict[str, Any] = {"key": name}
        _json_bytes(header, "value", value)
        headers.append(header)
    record["headers"] = headers
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def _logfmt_value(data: bytes | str | None) -> str:
    """A logfmt value: bare when unambiguous, else quoted with C-style escapes."""
    if data is None:
        return "null"
    text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
    if text != "null" and _LOGFMT_BARE.fullmatch(text) and text.isprintable():
        return text
    return '"' + "".join(_logfmt_char(char) for char in text) + '"'


def _logfmt_char(char: str) -> str:
    if char in _LOGFMT_ESCAPES:
        return _LOGFMT_ESCAPES[char]
    if "\udc80" <= char <= "\udcff":  # a byte that is not UTF-8, kept by surrogateescape
        return f"\\x{ord(char) - 0xDC00:02x}"
    if not char.isprintable():
        return f"\\u{ord(char):04x}"
    return char


def _logfmt_line(message: Message) -> bytes:
    kind, timestamp = _timestamp(message)
    pairs = [("topic", message.topic()), ("partition", str(message.partition())),
             ("offset", str(message.offset())),
             ("timestamp", None if timestamp is None else str(timestamp)),
             ("timestamp_type", kind), ("key", message.key()), ("value", message.value())]
    pairs += [(f"header.{name}", value) for name, value in consumed_headers(message)]
    return (" ".join(f"{name}={_logfmt_value(value)}" for name, value in pairs)
            + "\n").encode("utf-8")


def _raw_line(message: Message) -> bytes:
    return (message.value() or b"") + b"\n"
