"""The SASL mechanisms each listener serves, from Kafka's settings."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.config import BrokerConfig, ConfigError
from gregor.security import jaas, plain, scram
from gregor.security.sasl import SaslServer

PLAIN = "PLAIN"
SUPPORTED = (PLAIN, *scram.MECHANISMS)

# (user, mechanism) -> the user's credential for it, if any.
ScramLookup = Callable[[str, str], "scram.ScramCredential | None"]


@dataclass(frozen=True)
class ListenerSasl:
    """The SASL mechanisms one listener serves, each making a fresh server per client."""

    mechanisms: Mapping[str, Callable[[], SaslServer]]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.mechanisms)


def listener_sasl(config: BrokerConfig, listener: str, credentials: ScramLookup) -> ListenerSasl:
    """The mechanisms of ``listener``'s ``sasl.enabled.mechanisms``: PLAIN with the users
    of its JAAS config (``listener.name.<l>.plain.sasl.jaas.config``, ``user_<name>``
    options), SCRAM with the credentials ``credentials(user, mechanism)`` finds when a
    client authenticates (so added or changed users count at once)."""
    enabled = [name.upper() for name in config.for_listener(listener, "sasl.enabled.mechanisms")]
    unsupported = [name for name in enabled if name not in SUPPORTED]
    if unsupported or not enabled:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms "
                          f"{','.join(enabled) or '(empty)'}: only {', '.join(SUPPORTED)} are "
                          "served (Kafka's default, GSSAPI, is not)")
    mechanisms: dict[str, Callable[[], SaslServer]] = {}
    for name in enabled:
        if name == PLAIN:
            text = config.for_listener(listener, "sasl.jaas.config", mechanism=PLAIN)
            if not text:
                raise ConfigError(f"listener {listener}: PLAIN needs "
                                  f"listener.name.{listener.lower()}.plain.sasl.jaas.config "
                                  "with its users (user_<name>=\"<password>\")")
            mechanisms[name] = functools.partial(plain.PlainServer,
                                                 plain.users(jaas.parse(text)).get)
        else:
            mechanisms[name] = functools.partial(
                scram.ScramServer, name, functools.partial(_credential, credentials, name))
    return ListenerSasl(mechanisms)


def _credential(credentials: ScramLookup, mechanism: str, user: str
                ) -> scram.ScramCredential | None:
    return credentials(user, mechanism)
