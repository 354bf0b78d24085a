"""``gregor console``: a web console for any Kafka-compatible cluster.

The server is a Kafka client like the command line (librdkafka through
confluent-kafka) and reuses its pieces, so what the console shows and refuses is
what ``gregor topics``, ``gregor groups`` and ``gregor cluster`` show and refuse.
``admin`` answers the views and actions, ``messages`` browses and follows records,
``history`` samples offsets for rates and lag over time, ``server`` serves the
JSON API and the front end built from ``web/`` by ``scripts/build-console.sh``.
"""
