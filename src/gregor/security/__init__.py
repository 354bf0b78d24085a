"""Security as Kafka configures it: listeners and their security protocols, TLS
contexts from Kafka's ``ssl.*`` settings, principals, and the SASL mechanisms (PLAIN,
SCRAM-SHA-256/512) with the JAAS settings and credentials they check.

Everything here is pure (no sockets, no asyncio): the broker's listeners and
connections (:mod:`gregor.broker.authentication`) drive it, and it is testable alone.
"""
