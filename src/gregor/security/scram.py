"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them (KIP-84):
the credential format Kafka stores, the server's side of the exchange, and the
credential a KIP-554 AlterUserScramCredentials makes from a client's salted password.

A stored credential never holds the password: ``salt``, ``stored_key`` (H(ClientKey)),
``server_key`` and ``iterations``, written as Kafka writes them in ZooKeeper
(``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from gregor.security.sasl import AuthenticationFailed

# Kafka's ScramMechanism: name -> (hash, KIP-554 type code); iterations it accepts.
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
_NONCE_BYTES = 24


def mechanism_name(code: int) -> str | None:
    """The mechanism of a KIP-554 type code (1, 2); None for UNKNOWN (0) or others."""
    return next((name for name, (_, number) in MECHANISMS.items() if number == code), None)


def mechanism_code(name: str) -> int:
    return MECHANISMS[name][1]


def _hmac(algorithm: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algorithm).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: str, salted: bytes, salt: bytes,
                             iterations: int) -> ScramCredential:
        algorithm = MECHANISMS[mechanism][0]
        client_key = _hmac(algorithm, salted, b"Client Key")
        return cls(salt, hashlib.new(algorithm, client_key).digest(),
                   _hmac(algorithm, salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        salt = os.urandom(32)
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)

    def encode(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        """Kafka's ScramCredentialUtils.credentialFromString; ValueError if it is not one."""
        fields = dict(item.split("=", 1) for item in text.split(","))
        b64 = base64.b64decode
        return cls(b64(fields["salt"]), b64(fields["stored_key"]), b64(fields["server_key"]),
                   int(fields["iterations"]))


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailed(f"Invalid SCRAM message attribute {item[:20]!r}")
        pairs.append((key, value))
    return pairs


def _saslname(text: str) -> str:
    """RFC 5802's escaping of ``,`` and ``=`` in user names."""
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("Invalid username in SCRAM message")
    return text.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One client's exchange: client-first -> server-first, client-final -> server-final.

    As Kafka's ScramSaslServer: an unknown user fails at the first message, a proof
    that does not match the stored key at the second; extensions other than Kafka's
    ``tokenauth`` are ignored, delegation tokens are not served.
    """

    def __init__(self, mechanism: str,
                 credential_of: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._algorithm = MECHANISMS[mechanism][0]
        self._credential_of = credential_of
        self._state = self._client_first
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        return self._state(message)

    def _client_first(self, message: str) -> bytes:
        # gs2-header: "n,," (or "y,,"), optionally naming the authorization id "n,a=x,".
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthenticationFailed("Invalid SCRAM client first message: channel binding "
                                       "is not supported, a gs2 header n,, is expected")
        gs2_header = f"{parts[0]},{parts[1]},"
        authzid = _saslname(parts[1][2:]) if parts[1].startswith("a=") else ""
        if parts[1] and not authzid:
            raise AuthenticationFailed("Invalid SCRAM client first message: bad gs2 header")
        bare = parts[2]
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise AuthenticationFailed("Invalid SCRAM client first message: expected n= "
                                       "and r=")
        username, client_nonce = _saslname(attributes[0][1]), attributes[1][1]
        extensions = dict(attributes[2:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed("Authentication failed: delegation tokens are not "
                                       "supported")
        if not username or not client_nonce:
            raise AuthenticationFailed("Invalid SCRAM client first message: empty user or "
                                       "nonce")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        credential = self._credential_of(username)
        if credential is None:
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        # Letters and digits only, as Kafka's: librdkafka 2.0 mis-reads a nonce with "=".
        nonce = client_nonce + secrets.token_hex(_NONCE_BYTES)
        server_first = (f"r={nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._username, self._credential, self._nonce = username, credential, nonce
        self._gs2_header, self._auth_prefix = gs2_header, f"{bare},{server_first},"
        self._state = self._client_final
        return server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Invalid SCRAM client final message: no proof")
        attributes = dict(_attributes(without_proof))
        # Kafka checks that the nonce ends with the server's, not that it equals it, and
        # librdkafka 2.0 (Debian's kcat) relies on that: it sends its own nonce twice.
        if not attributes.get("r", "").endswith(self._nonce):
            raise AuthenticationFailed("Invalid client nonce in the final client message.")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client final message: channel "
                                       "binding mismatch")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client final message: bad proof") from None
        credential = self._credential
        auth_message = (self._auth_prefix + without_proof).encode()
        signature = _hmac(self._algorithm, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid client final message")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._algorithm, client_key).digest(),
                                   credential.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.complete = True
        self.authorization_id = self._username
        self._state = self._done
        server_signature = _hmac(self._algorithm, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

    def _done(self, message: str) -> bytes:
        raise AuthenticationFailed("Invalid SCRAM message: the exchange is complete")


class ScramClient:
    """The client's side, for this broker's own connections to the others (the
    inter-broker listener): client-first, then client-final from the server-first, then
    the server's signature checked, so a broker never talks to an impostor."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._algorithm = MECHANISMS[mechanism][0]
        self.mechanism = mechanism
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = secrets.token_hex(_NONCE_BYTES)
        self._first_bare = f"n={name},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        """The proof for the server's challenge; AuthenticationFailed if it is not one."""
        try:
            text = server_first.decode()
            attributes = dict(_attributes(text))
            nonce, salt = attributes["r"], base64.b64decode(attributes["s"])
            iterations = int(attributes["i"])
        except (ValueError, KeyError):
            raise AuthenticationFailed("Invalid SCRAM server first message") from None
        if not nonce.startswith(self._nonce) or iterations < MIN_ITERATIONS:
            raise AuthenticationFailed("Invalid SCRAM server first message: bad nonce or "
                                       "too few iterations")
        salted = hashlib.pbkdf2_hmac(self._algorithm, self._password.encode(), salt, iterations)
        client_key = _hmac(self._algorithm, salted, b"Client Key")
        stored_key = hashlib.new(self._algorithm, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = _hmac(self._algorithm, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(
            self._algorithm, _hmac(self._algorithm, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(server_final, expected):
            raise AuthenticationFailed("Invalid SCRAM server final message: the server does "
                                       "not know the credential")
