"""Kafka's Java client security settings in librdkafka's names.

Spark's Kafka source takes the Java consumer's settings (``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``, ...), while gregor's clients -- librdkafka on the
driver and in the sink, :mod:`gregor.client.connection` on the executors -- take
librdkafka's (``sasl.username``/``sasl.password``, ``ssl.ca.location``, ...). A job moved
from ``format("kafka")`` to ``format("gregor")`` keeps its settings: they are renamed here
once, on the driver, before any client sees them. librdkafka's own names, given as well,
win.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gregor.security import jaas, tls


def librdkafka_security(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` with the Java client's SASL and TLS settings replaced by librdkafka's.

    ``sasl.jaas.config`` (PlainLoginModule or ScramLoginModule) gives ``sasl.username``
    and ``sasl.password``; a PEM trust store gives ``ssl.ca.location``, a PKCS12 one (or
    ``ssl.truststore.certificates``) its certificates as ``ssl.ca.pem``; a PKCS12 key
    store keeps its name, which librdkafka shares; an empty
    ``ssl.endpoint.identification.algorithm`` (Java's way to skip the host name check)
    becomes ``none``. ValueError names a setting that cannot be carried over (JKS, which
    only Java reads).
    """
    renamed = dict(config)
    jaas_text = renamed.pop("sasl.jaas.config", None)
    if jaas_text:
        options = jaas.parse(jaas_text).options
        for name in ("username", "password"):
            if name in options:
                renamed.setdefault(f"sasl.{name}", options[name])
    trust_kind = renamed.pop("ssl.truststore.type", "JKS").strip().upper()
    trust_location = renamed.pop("ssl.truststore.location", "")
    trust_password = renamed.pop("ssl.truststore.password", "")
    inline = renamed.pop("ssl.truststore.certificates", "")
    if inline:
        renamed.setdefault("ssl.ca.pem", inline)
    elif trust_location and trust_kind == "PEM":
        renamed.setdefault("ssl.ca.location", trust_location)
    elif trust_location and trust_kind == "PKCS12":
        renamed.setdefault("ssl.ca.pem", tls.pkcs12_certificates(
            Path(trust_location).read_bytes(), trust_password))
    elif trust_location:
        raise ValueError(f"kafka.ssl.truststore.type {trust_kind}: only PEM and PKCS12 trust "
                         "stores are read (convert JKS with keytool -importkeystore "
                         "-deststoretype PKCS12)")
    key_kind = renamed.pop("ssl.keystore.type", "PKCS12").strip().upper()
    if renamed.get("ssl.keystore.location") and key_kind != "PKCS12":
        raise ValueError(f"kafka.ssl.keystore.type {key_kind}: only PKCS12 key stores are "
                         "read (or ssl.certificate.location and ssl.key.location, PEM)")
    if renamed.get("ssl.endpoint.identification.algorithm", "x").strip() == "":
        renamed["ssl.endpoint.identification.algorithm"] = "none"
    return renamed
