"""A blocking Kafka client connection: requests encoded by kio (through
:mod:`gregor.protocol.codec`), pipelined if the caller wishes, answers read back in
order; over TLS and with SASL (PLAIN, SCRAM-SHA-256/512) when the client's security
settings ask for them, as librdkafka's ``security.protocol``, ``ssl.*`` and ``sasl.*``
properties name them (:func:`client_security`).

The Spark source's executors read record batches over it, and the schema registry's
instances elect their primary over it (librdkafka's consumer groups admit only the
"consumer" protocol type).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.protocol.codec import decode_response, encode_request
from gregor.security import sasl_client, tls
from gregor.security.inter_broker import ChannelSecurity
from gregor.security.sasl import AuthenticationFailed
from gregor.security.sasl_mechanisms import SUPPORTED

_SIZE = struct.Struct(">i")


class BrokerUnavailable(Exception):
    """No usable connection to the broker right now; another (or later) may do."""


class AuthenticationRefused(Exception):
    """The broker refused the client's SASL credentials (or proved it does not know the
    SCRAM password). Not a :class:`BrokerUnavailable`: asking again cannot help, so
    callers that retry those fail at once, as Kafka's clients do on a
    SaslAuthenticationException."""


@dataclass(frozen=True)
class ClientSettings:
    bootstrap: tuple[tuple[str, int], ...]
    client_id: str = "gregor"
    socket_timeout_ms: int = 60_000
    security: ChannelSecurity | None = None
    """TLS and/or SASL (None: PLAINTEXT)."""


def parse_bootstrap(servers: str) -> tuple[tuple[str, int], ...]:
    """``host:port`` pairs from a bootstrap list (``PLAINTEXT://`` prefixes and IPv6
    brackets allowed, as in Kafka's clients)."""
    addresses = []
    for item in servers.split(","):
        item = item.strip().rsplit("://", 1)[-1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError(f"no bootstrap server in {servers!r}")
    return tuple(addresses)


def security_options(config: Mapping[str, str]) -> dict[str, str]:
    """The part of a librdkafka client configuration :func:`client_security` reads
    (``security.protocol``, ``ssl.*``, ``sasl.*``)."""
    return {name: value for name, value in config.items()
            if name == "security.protocol" or name.startswith(("ssl.", "sasl."))}


def client_security(config: Mapping[str, Any]) -> ChannelSecurity | None:
    """The security a librdkafka client configuration asks for (``security.protocol``
    PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; ``ssl.ca.location``,
    ``ssl.ca.pem``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``ssl.key.password``, ``ssl.keystore.location``/``.password`` (PKCS12),
    ``ssl.endpoint.identification.algorithm``; ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``), so that a tool speaks to the brokers as its librdkafka clients
    do; None for PLAINTEXT."""
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"security.protocol {protocol} is not one of Kafka's")
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol.endswith("SSL"):
        context = ssl.create_default_context(cafile=config.get("ssl.ca.location"),
                                             cadata=config.get("ssl.ca.pem"))
        if config.get("ssl.certificate.location"):
            context.load_cert_chain(config["ssl.certificate.location"],
                                    config.get("ssl.key.location"),
                                    config.get("ssl.key.password"))
        elif config.get("ssl.keystore.location"):
            tls.load_pkcs12_key_store(context, Path(config["ssl.keystore.location"]).read_bytes(),
                                      str(config.get("ssl.keystore.password", "")))
        # librdkafka checks the broker's host name unless this is set to "none".
        context.check_hostname = str(config.get(
            "ssl.endpoint.identification.algorithm", "https")).lower() == "https"
    if not protocol.startswith("SASL"):
        return ChannelSecurity(context)
    mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")))
    if mechanism.upper() not in SUPPORTED:
        raise ValueError(f"sasl.mechanism {mechanism}: only {', '.join(SUPPORTED)} are spoken")
    return ChannelSecurity(context, mechanism.upper(), str(config.get("sasl.username", "")),
                           str(config.get("sasl.password", "")))


class BrokerConnection:
    """One blocking connection; requests may be pipelined, answers come back in order."""

    def __init__(self, address: tuple[str, int], settings: ClientSettings) -> None:
        self._client_id = settings.client_id
        self._correlation_id = 0
        self._in_flight: deque[tuple[int, int, int]] = deque()
        security = settings.security
        try:
            connected = socket.create_connection(address,
                                                 timeout=settings.socket_timeout_ms / 1000)
            connected.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if security is not None and security.ssl_context is not None:
                connected = security.ssl_context.wrap_socket(connected,
                                                             server_hostname=address[0])
        except (OSError, ssl.SSLError) as exc:
            raise BrokerUnavailable(f"cannot connect to {address[0]}:{address[1]}: {exc}") \
                from exc
        self._socket = connected
        if security is not None and security.sasl_mechanism is not None:
            try:
                sasl_client.authenticate(sasl_client.exchange(
                    security.sasl_mechanism, security.username, security.password),
                    self.request)
            except AuthenticationFailed as exc:
                self.close()
                raise AuthenticationRefused(
                    f"{address[0]}:{address[1]}: SASL {security.sasl_mechanism}: {exc}") \
                    from None

    def send(self, api_key: int, version: int, body: Any) -> None:
        self._correlation_id += 1
        frame = encode_request(api_key, version, self._correlation_id, self._client_id, body)
        try:
            self._socket.sendall(frame)
        except OSError as exc:
            raise BrokerUnavailable(f"sending a request failed: {exc}") from exc
        self._in_flight.append((api_key, version, self._correlation_id))

    def receive(self) -> Any:
        """The answer to the oldest request sent."""
        api_key, version, expected = self._in_flight.popleft()
        try:
            (size,) = _SIZE.unpack(self._read(_SIZE.size))
            frame = self._read(size)
        except OSError as exc:
            raise BrokerUnavailable(f"reading an answer failed: {exc}") from exc
        correlation_id, body = decode_response(api_key, version, frame)
        if correlation_id != expected:
            raise BrokerUnavailable(f"answer {correlation_id} to request {expected}")
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive()

    def close(self) -> None:
        self._socket.close()

    def detach(self) -> socket.socket:
        """The connected (and authenticated) socket, for a caller that frames its own
        requests over it from now on (``bench.saturate``'s load on a SASL_SSL listener)."""
        return self._socket

    def _read(self, size: int) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self._socket.recv_into(view[got:])
            if n == 0:
                raise OSError("connection closed by the broker")
            got += n
        return buf


def bootstrap_connection(settings: ClientSettings) -> BrokerConnection:
    """A connection to the first bootstrap server that accepts one."""
    failures = []
    for address in settings.bootstrap:
        try:
            return BrokerConnection(address, settings)
        except BrokerUnavailable as exc:
            failures.append(str(exc))
    raise BrokerUnavailable("no bootstrap server answered: " + "; ".join(failures))
