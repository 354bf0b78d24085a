"""Who is on a connection: Kafka's principal (``User:alice``) and the listener it came in on.

Kafka names a principal ``<type>:<name>``. A PLAINTEXT or unauthenticated TLS client is
``User:ANONYMOUS``; a TLS client with a certificate is ``User:`` followed by the
certificate's subject as Java prints it (RFC 2253: ``CN=alice,OU=eng,O=acme,C=US``,
most specific first), which is what ``super.users`` and ACLs name; a SASL client is
``User:<user name>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gregor.security.listeners import SecurityProtocol
from gregor.security.sasl import SaslServer

USER = "User"
ANONYMOUS_NAME = "ANONYMOUS"

# How Java's X500Principal.getName() (RFC 2253) spells the attributes Python's ssl
# reports by their long names. Others keep Python's name: no CA of ours issues them.
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID",
}
_RFC2253_SPECIAL = ',+"\\<>;'


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER, ANONYMOUS_NAME)


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER, name)


def certificate_subject(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """A certificate subject as ``ssl.SSLSocket.getpeercert()`` gives it (relative
    distinguished names in certificate order) in RFC 2253 form, as Kafka's default
    ``ssl.principal.mapping.rules`` leave it."""
    rdns = []
    for rdn in subject:
        rdns.append("+".join(f"{_RFC2253_KEYWORDS.get(key, key)}={_escape(value)}"
                             for key, value in rdn))
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    escaped = "".join(f"\\{ch}" if ch in _RFC2253_SPECIAL else ch for ch in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


@dataclass(slots=True)
class Session:
    """A connection's security context, shared by all its requests (Kafka's
    RequestContext): set up once when the connection is made, and once more when a SASL
    client authenticates."""

    listener: str
    protocol: SecurityProtocol
    principal: KafkaPrincipal = ANONYMOUS
    # The SASL mechanism the client authenticated with; None before or without SASL.
    mechanism: str | None = None
    # KIP-368: when the authenticated session ends (the event loop's clock), None when
    # connections.max.reauth.ms is 0; the exchange of a re-authentication in progress;
    # and how a failed one ends the connection at once (set by the connection).
    expires_at: float | None = None
    reauthentication: SaslServer | None = None
    end: Callable[[], None] | None = None
