"""Security as Kafka configures it: listeners and their security protocols, TLS
contexts from Kafka's ``ssl.*`` settings, and principals.

Everything here is pure (no sockets, no asyncio): the broker's listeners and
connections use it, and it is testable alone.
"""
