"""InitProducerId without a transactional id, as Kafka answers it: a new producer id
at epoch 0 every time, also to a producer that names the id and epoch it had
(Kafka's TransactionCoordinator.handleInitProducerId); an id without an epoch, or the
reverse, is an invalid request (KafkaApis)."""

from __future__ import annotations

import datetime

from clients import WireConnection, advertised_versions, versioned_request

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

_KEY = ApiKey.INIT_PRODUCER_ID
_NAMES_A_PRODUCER = 3  # producer_id and producer_epoch fields from v3 on


def init(connection: WireConnection, version: int, producer_id: int, epoch: int):
    return connection.request(_KEY, version, versioned_request(
        _KEY, version, "InitProducerIdRequest", transactional_id=None,
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=producer_id,
        producer_epoch=epoch))


def test_an_idempotent_producer_naming_its_id_gets_a_new_one(broker: BrokerProcess) -> None:
    with WireConnection(broker.bootstrap) as connection:
        versions = advertised_versions(connection, _KEY)
        assert versions.stop > _NAMES_A_PRODUCER
        for version in versions:
            first = init(connection, version, -1, -1)
            assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
            if version < _NAMES_A_PRODUCER:
                continue
            again = init(connection, version, first.producer_id, first.producer_epoch)
            assert again.error_code == ErrorCode.none
            assert again.producer_id not in (first.producer_id, -1)
            assert again.producer_epoch == 0
            for half in ((first.producer_id, -1), (-1, 0)):
                refused = init(connection, version, *half)
                assert (refused.error_code, refused.producer_id, refused.producer_epoch) == (
                    ErrorCode.invalid_request, -1, -1), (version, half)
