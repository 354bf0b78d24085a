"""Listeners as Kafka names them: ``listeners=SASL_SSL://:9093,PLAINTEXT://127.0.0.1:9092``.

A listener's name maps to a security protocol through ``listener.security.protocol.map``
(by default each of Kafka's four protocol names maps to itself, so ``SASL_SSL://...``
needs no map); ``advertised.listeners`` says, per listener name, what clients connected
on that listener are told in Metadata; ``inter.broker.listener.name`` (or
``security.inter.broker.protocol``) picks the one other brokers use.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gregor.config import BrokerConfig, ConfigError, parse_listener


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper case, as Kafka normalizes it
    protocol: SecurityProtocol
    host: str  # "" for every address
    port: int


def protocol_map(config: BrokerConfig) -> dict[str, SecurityProtocol]:
    mapping: dict[str, SecurityProtocol] = {}
    for item in config["listener.security.protocol.map"]:
        name, sep, protocol = item.partition(":")
        try:
            mapping[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not "
                              "NAME:PROTOCOL with a protocol Kafka knows") from None
        if not sep:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
    return mapping


def _parse(config: BrokerConfig, key: str) -> list[Listener]:
    mapping = protocol_map(config)
    listeners: list[Listener] = []
    for item in config[key]:
        name = item.split("://", 1)[0].strip().upper() if "://" in item else "PLAINTEXT"
        if name not in mapping:
            raise ConfigError(f"{key}: listener {name} has no security protocol in "
                              "listener.security.protocol.map")
        host, port = parse_listener(item)
        if any(listener.name == name for listener in listeners):
            raise ConfigError(f"{key}: listener name {name} appears twice")
        listeners.append(Listener(name, mapping[name], host, port))
    return listeners


def listeners(config: BrokerConfig) -> list[Listener]:
    """The listeners to bind, in the order given (the first one's address is what a
    single broker reports as its own)."""
    bound = _parse(config, "listeners")
    if not bound:
        raise ConfigError("listeners: at least one listener is needed")
    ports = [listener.port for listener in bound if listener.port]
    if len(ports) != len(set(ports)):
        raise ConfigError("listeners: two listeners share a port")
    return bound


def advertised(config: BrokerConfig, bound_ports: dict[str, int]) -> dict[str, tuple[str, int]]:
    """What clients of each listener are told: ``advertised.listeners`` where it names
    the listener, else the listener's own address (an unspecified host becomes
    127.0.0.1, port 0 the port the kernel chose, which ``bound_ports`` holds)."""
    own = {listener.name: listener for listener in listeners(config)}
    result: dict[str, tuple[str, int]] = {}
    for listener in _parse(config, "advertised.listeners"):
        if listener.name not in own:
            raise ConfigError(f"advertised.listeners: {listener.name} is not a listener")
        result[listener.name] = (listener.host, listener.port)
    for name, listener in own.items():
        host, port = result.get(name, (listener.host, listener.port))
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        result[name] = (host, port or bound_ports.get(name, 0))
    return result


def inter_broker_listener(config: BrokerConfig) -> Listener:
    """The listener other brokers connect to: ``inter.broker.listener.name``, else the
    first listener whose protocol is ``security.inter.broker.protocol``."""
    own = listeners(config)
    name = config["inter.broker.listener.name"].strip().upper()
    if name:
        for listener in own:
            if listener.name == name:
                return listener
        raise ConfigError(f"inter.broker.listener.name: {name} is not a listener")
    wanted = SecurityProtocol(config["security.inter.broker.protocol"])
    for listener in own:
        if listener.protocol == wanted:
            return listener
    if "security.inter.broker.protocol" not in config.explicit:
        return own[0]  # gregor's own single-listener setups name no inter-broker listener
    raise ConfigError(f"security.inter.broker.protocol: no listener uses {wanted}")
