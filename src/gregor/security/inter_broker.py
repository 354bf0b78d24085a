"""How this broker connects to the others: the inter-broker listener's security, as
Kafka sets it up (``inter.broker.listener.name`` or ``security.inter.broker.protocol``;
``sasl.mechanism.inter.broker.protocol``; the credentials from the ``username`` and
``password`` options of the listener's JAAS setting for that mechanism, e.g.
``listener.name.internal.scram-sha-512.sasl.jaas.config``)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from gregor.config import BrokerConfig, ConfigError
from gregor.security import jaas, listeners, tls
from gregor.security.sasl_mechanisms import SUPPORTED


@dataclass(frozen=True)
class ChannelSecurity:
    """TLS and/or SASL of connections to other brokers (None of both: plaintext)."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""


def inter_broker_security(config: BrokerConfig) -> ChannelSecurity | None:
    """None when the inter-broker listener is PLAINTEXT: nothing to set up."""
    listener = listeners.inter_broker_listener(config)
    protocol = listener.protocol
    if not protocol.tls and not protocol.sasl:
        return None
    context = tls.client_context(config, listener.name) if protocol.tls else None
    if not protocol.sasl:
        return ChannelSecurity(context)
    mechanism = config["sasl.mechanism.inter.broker.protocol"].upper()
    if mechanism not in SUPPORTED:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol {mechanism}: only "
                          f"{', '.join(SUPPORTED)} are served")
    text = config.for_listener(listener.name, "sasl.jaas.config", mechanism=mechanism)
    options = jaas.parse(text).options if text else {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(f"the inter-broker listener {listener.name} uses SASL {mechanism}: "
                          f"listener.name.{listener.name.lower()}.{mechanism.lower()}."
                          "sasl.jaas.config needs the username and password brokers use")
    return ChannelSecurity(context, mechanism, options["username"], options["password"])
