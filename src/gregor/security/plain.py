"""SASL/PLAIN (RFC 4616), checked against the users of the listener's JAAS config, as
Kafka's PlainServerCallbackHandler does: ``user_<name>="<password>"`` options."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from gregor.security.jaas import LoginModule
from gregor.security.sasl import AuthenticationFailed

_USER_PREFIX = "user_"


def users(module: LoginModule) -> dict[str, str]:
    return {key[len(_USER_PREFIX):]: value for key, value in module.options.items()
            if key.startswith(_USER_PREFIX)}


class PlainServer:
    def __init__(self, password_of: Callable[[str], str | None]) -> None:
        self._password_of = password_of
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        expected = self._password_of(username)
        # Compared in constant time, and a made-up password for an unknown user, so
        # that neither the time taken nor the answer tells which users exist.
        if not hmac.compare_digest((expected or "\0unknown").encode(), password.encode()) or (
                expected is None):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.authorization_id = username
        self.complete = True
        return b""
