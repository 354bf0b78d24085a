"""A schema registry with Confluent's REST API, its state in the ``_schemas`` topic.

Layers (imports point downward): ``api`` (HTTP routes) -> ``registry`` (the operations,
their checks and the writes) -> ``schema_topic`` (the Kafka client of ``_schemas``) and
``state`` (what the topic's records say) -> ``records`` (their key and value JSON),
``compatibility`` -> the formats (``avro_format``, ``json_format``, ``protobuf_format``)
-> ``errors``.
"""
