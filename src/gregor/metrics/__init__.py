"""Prometheus metrics of a broker, named as Kafka's JMX exporter names Kafka's MBeans.

The hot path only adds to plain counters (:mod:`.broker_metrics`); everything else,
per-partition log offsets, replication health, group lag, is read from the broker's
own state when Prometheus scrapes (:mod:`.collector`), on the broker's event loop
(:mod:`.endpoint`), so a scrape sees one consistent state and costs nothing between
scrapes.
"""
