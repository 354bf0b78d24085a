"""The versions the broker advertises, checked against Kafka's own definitions of its
APIs (the JSON message definitions kafka-python ships), not against gregor's route
table: a range the broker makes up would otherwise be a range the tests believe."""

from __future__ import annotations

from clients import WireConnection, api_versions, kafka_versions

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey


def test_every_advertised_range_is_one_kafka_defines(broker: BrokerProcess) -> None:
    """Every advertised API is one of Kafka's, its versions within Kafka's valid ones;
    Produce from 0, as Kafka 4 advertises it (KAFKA-18659) though it serves only 3+."""
    with WireConnection(broker.bootstrap) as connection:
        advertised = api_versions(connection)
    assert ApiKey.PRODUCE in advertised and ApiKey.FETCH in advertised
    outside = {}
    for api_key, versions in advertised.items():
        kafka = kafka_versions(api_key)
        low = 0 if api_key == ApiKey.PRODUCE else kafka.start
        if not (low <= versions.start and versions.stop <= kafka.stop and versions):
            outside[ApiKey(api_key).name] = (versions, kafka)
    assert outside == {}, "advertised (left) outside Kafka's versions (right)"
