"""Data pipelines on Spark that read and write topics through the ``gregor`` source.

Each pipeline module has a ``start(spark, streams, ...)`` that creates its topics and
starts its streaming queries; ``gregor pipeline run NAME`` calls it.  The generators
(``*_events``) and :mod:`event_publisher` feed them (``gregor pipeline generate NAME``).
"""
