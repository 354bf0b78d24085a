"""Security as Kafka configures it: listeners and their security protocols, TLS
contexts from Kafka's ``ssl.*`` settings, principals, the SASL mechanisms (PLAIN,
SCRAM-SHA-256/512) with the JAAS settings and credentials they check, the inter-broker
channel's security, ACLs with the authorizer's rules, and client quotas (their
entities, Kafka's precedence among them, the measured rates and throttle times).

Everything here is pure (no sockets, no asyncio): the broker's listeners and
connections (:mod:`gregor.broker.authentication`, :mod:`gregor.broker.throttling`),
its handlers (:mod:`gregor.broker.authorization`) and the inter-broker channel drive it, and it is
testable alone.
"""
