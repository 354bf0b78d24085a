"""TLS contexts from Kafka's ``ssl.*`` settings, for a listener (server side) and for
this broker's connections to the others (client side).

Kafka reads key and trust stores as Java does; OpenSSL reads PEM. ``ssl.keystore.type``
PEM (a file holding the private key, PKCS#8, and its certificate chain, or the two
inline as ``ssl.keystore.key``/``ssl.keystore.certificate.chain``) is loaded as is;
PKCS12 is converted with ``cryptography``. JKS, Java's own format, cannot be read
here: ``keytool -importkeystore -deststoretype PKCS12`` converts it.

Every setting can be given per listener (``listener.name.<l>.ssl.keystore.location``),
as in Kafka.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gregor.config import BrokerConfig, ConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}
# IANA names of key exchange and authentication, as OpenSSL prefixes its cipher names.
_KEY_EXCHANGE = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-",
                 "DHE_RSA": "DHE-RSA-", "RSA": ""}


def server_context(config: BrokerConfig, listener: str, sasl: bool = False) -> ssl.SSLContext:
    """The TLS context of one listener: its key store, trust store, client
    authentication (``ssl.client.auth``), versions and cipher suites.

    On a SASL_SSL listener (``sasl``) clients authenticate with SASL: as in Kafka, the
    broker-wide ``ssl.client.auth`` does not apply there, only the listener's own."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, config, listener)
    if not _load_key_store(context, config, listener):
        raise ConfigError(f"listener {listener} uses TLS but has no ssl.keystore.location "
                          "(or ssl.keystore.key)")
    client_auth = config.for_listener(listener, "ssl.client.auth")
    if sasl and f"listener.name.{listener.lower()}.ssl.client.auth" not in config.per_listener:
        client_auth = "none"
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if context.verify_mode != ssl.CERT_NONE and not _load_trust_store(context, config,
                                                                      listener):
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context


def reload_key_store(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    """Load the listener's key store (changed while the broker runs) into its context:
    connections made from now on are offered the new certificate, open ones keep theirs."""
    if not _load_key_store(context, config, listener):
        raise ConfigError(f"listener {listener} uses TLS but has no ssl.keystore.location "
                          "(or ssl.keystore.key)")


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context this broker connects to another's ``listener`` with: the same trust
    store (the other broker's certificate is checked, its host name too unless
    ``ssl.endpoint.identification.algorithm`` is empty) and key store (for mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure(context, config, listener)
    if not _load_trust_store(context, config, listener):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_key_store(context, config, listener)
    context.check_hostname = bool(
        config.for_listener(listener, "ssl.endpoint.identification.algorithm"))
    return context


def _configure(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    versions = sorted(_VERSIONS[name]
                      for name in config.for_listener(listener, "ssl.enabled.protocols"))
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    suites = config.for_listener(listener, "ssl.cipher.suites")
    if suites:
        tls12 = [openssl_cipher_name(suite) for suite in suites
                 if not is_tls13_suite(suite)]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise ConfigError(f"ssl.cipher.suites: none of {', '.join(suites)} is "
                                  "available") from None
        if len(tls12) == len(suites):
            # No TLS 1.3 suite named: Java then cannot negotiate TLS 1.3 either. (Named
            # ones cannot be narrowed further: Python's ssl offers every TLS 1.3 suite.)
            context.maximum_version = ssl.TLSVersion.TLSv1_2
        elif not tls12:
            context.minimum_version = ssl.TLSVersion.TLSv1_3


def is_tls13_suite(name: str) -> bool:
    return name.startswith("TLS_") and "_WITH_" not in name


def openssl_cipher_name(name: str) -> str:
    """A TLS 1.2 cipher suite's IANA name, which Kafka's ``ssl.cipher.suites`` uses
    (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``), as OpenSSL names it
    (``ECDHE-RSA-AES256-GCM-SHA384``); an OpenSSL name is kept as it is."""
    if not name.startswith("TLS_"):
        return name
    exchange, sep, cipher = name[len("TLS_"):].partition("_WITH_")
    if not sep or exchange not in _KEY_EXCHANGE:
        raise ConfigError(f"ssl.cipher.suites: unknown cipher suite {name}")
    parts = cipher.split("_")
    if parts[0] == "AES" and len(parts) >= 3:
        parts = [f"AES{parts[1]}", *parts[2:]]
    if parts[-1] == "POLY1305" or parts[:2] == ["CHACHA20", "POLY1305"]:
        parts = ["CHACHA20", "POLY1305"]
    if "CBC" in parts:
        parts.remove("CBC")
    return _KEY_EXCHANGE[exchange] + "-".join(parts)


def _load_key_store(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Load the listener's key and certificate chain; False when none is configured."""
    kind = config.for_listener(listener, "ssl.keystore.type").upper()
    location = config.for_listener(listener, "ssl.keystore.location")
    key_password = config.for_listener(listener, "ssl.key.password") or None
    inline_key = config.for_listener(listener, "ssl.keystore.key")
    if inline_key:
        chain = config.for_listener(listener, "ssl.keystore.certificate.chain")
        with _private_file(inline_key + "\n" + chain) as path:
            _load_chain(context, path, key_password)
        return True
    if not location:
        return False
    if kind == "PEM":
        _load_chain(context, location, key_password)
    elif kind == "PKCS12":
        load_pkcs12_key_store(context, Path(location).read_bytes(),
                              config.for_listener(listener, "ssl.keystore.password"))
    else:
        raise ConfigError(f"ssl.keystore.type {kind}: only PEM and PKCS12 are read here "
                          "(convert JKS with keytool -importkeystore -deststoretype PKCS12)")
    return True


def _load_chain(context: ssl.SSLContext, path: str, password: str | None) -> None:
    try:
        context.load_cert_chain(path, password=password)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load the key store {path}: {exc}") from None


def _load_trust_store(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Load the listener's trusted certificates; False when none are configured."""
    inline = config.for_listener(listener, "ssl.truststore.certificates")
    location = config.for_listener(listener, "ssl.truststore.location")
    kind = config.for_listener(listener, "ssl.truststore.type").upper()
    try:
        if inline:
            context.load_verify_locations(cadata=inline)
        elif not location:
            return False
        elif kind == "PEM":
            context.load_verify_locations(cafile=location)
        elif kind == "PKCS12":
            context.load_verify_locations(cadata=pkcs12_certificates(
                Path(location).read_bytes(),
                config.for_listener(listener, "ssl.truststore.password")))
        else:
            raise ConfigError(f"ssl.truststore.type {kind}: only PEM and PKCS12 are read "
                              "here")
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the trust store {location or '(inline)'}: "
                          f"{exc}") from None
    return True


def load_pkcs12_key_store(context: ssl.SSLContext, data: bytes, password: str) -> None:
    """Load a PKCS12 key store's key and certificate chain into ``context``."""
    pem, transient = _pkcs12_chain(data, password)
    with _private_file(pem) as path:
        _load_chain(context, path, transient)


def _pkcs12_chain(data: bytes, password: str) -> tuple[str, str]:
    """A PKCS12 key store's key and chain as PEM, the key encrypted with a fresh
    password (returned with it): it only passes through a file to reach OpenSSL."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, certificate, others = pkcs12.load_key_and_certificates(
        data, password.encode() or None)
    if key is None or certificate is None:
        raise ConfigError("the PKCS12 key store holds no private key with its certificate")
    transient = secrets.token_urlsafe(24)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(transient.encode()))
    for cert in (certificate, *others):
        pem += cert.public_bytes(serialization.Encoding.PEM)
    return pem.decode(), transient


def pkcs12_certificates(data: bytes, password: str) -> str:
    """The certificates of a PKCS12 trust store, as PEM (what OpenSSL's ``cadata`` and
    librdkafka's ``ssl.ca.pem`` take)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    _, certificate, others = pkcs12.load_key_and_certificates(data, password.encode() or None)
    certificates = [c for c in (certificate, *others) if c is not None]
    if not certificates:
        raise ConfigError("the PKCS12 trust store holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)


@contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A file only this user can read, removed after use."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        yield path
    finally:
        os.unlink(path)
