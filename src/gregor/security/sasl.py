"""SASL mechanisms, server side, as Kafka's broker runs them: each a small state machine
fed the client's tokens (from SaslAuthenticate, or raw frames after SaslHandshake v0)
that answers with the server's tokens until it is complete or fails.

A failure carries the words the client is told with SASL_AUTHENTICATION_FAILED. A
malformed token is a failure like a wrong password: it never escapes as another error.
The mechanisms a listener serves are set up by :mod:`gregor.security.sasl_mechanisms`.
"""

from __future__ import annotations

from typing import Protocol


class AuthenticationFailed(Exception):
    """The client is not authenticated; ``str(exc)`` is what it is told."""


class SaslServer(Protocol):
    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user: the principal's name once complete."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The answer to one client token; AuthenticationFailed if it does not
        authenticate (wrong credentials, or a token that is not the mechanism's)."""
        ...
