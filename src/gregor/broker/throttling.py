"""What a request costs against its client's quotas, and the answer that says so.

Kafka records each request when its answer is ready (CreateTopics, CreatePartitions and
DeleteTopics also record their partition mutations as they make them, against
``controller_mutation_rate``, and are throttled until those are paid for): a produce's size against
``producer_byte_rate``, a fetch answer's size against ``consumer_byte_rate``, the time
its handler took against ``request_percentage`` (except for the requests that must pass
whatever the quota: SASL, inter-broker ones, and followers' fetches). The largest
throttle time earned goes into the answer's ``throttle_time_ms``, and the connection is
not read for that long (KIP-219): the answer goes out at once to a client that knows
to wait itself, or only after the throttle time to one whose request version
predates KIP-219.

A consumer's fetch is recorded as Kafka's KafkaApis.handleFetchRequest records it: once
its answer is read but before it is committed to the fetch session
(:meth:`Charge.fetch_answer`). Over the consumer or the request quota, the fetch is
answered empty with the throttle time (the fetch session's ``getThrottledResponse``)
and its bytes are taken back, since they are not sent; the client asks again for the
same records after the throttle time. Its size is bounded by the quota window
(:func:`bounded_fetch`), as in Kafka.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from time import perf_counter
from typing import Any

from gregor.broker.request import RawResponse, Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.fetch_response import with_throttle as fetch_with_throttle
from gregor.protocol.metadata_response import with_throttle as metadata_with_throttle
from gregor.protocol.produce_response import with_throttle as produce_with_throttle
from gregor.security.quotas import PERCENT_PER_SECOND, ClientQuotas

# The first version of each API whose client waits out a throttle itself (KIP-219);
# older ones are answered only once the throttle time has passed. APIs newer than
# Kafka 2.0 have it from version 0.
_KIP219_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2, ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1, ApiKey.OFFSET_FOR_LEADER_EPOCH: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1, ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_ACLS: 1, ApiKey.CREATE_ACLS: 1,
    ApiKey.DELETE_ACLS: 1, ApiKey.DESCRIBE_CONFIGS: 1, ApiKey.ALTER_CONFIGS: 1,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 1, ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
}
# The APIs controller_mutation_rate holds back (KIP-599), and the first version of each
# whose request over it is refused (THROTTLING_QUOTA_EXCEEDED per topic) rather than
# served and throttled afterwards.
MUTATIONS: dict[int, int] = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3,
                             ApiKey.DELETE_TOPICS: 5}
# Requests the request quota never holds back (Kafka's exempt APIs that gregor serves).
_EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                     ApiKey.WRITE_TXN_MARKERS})


def waits_for_client(api_key: int, version: int) -> bool:
    """Whether the answer goes out before the throttle time (KIP-219) or after it."""
    return version >= _KIP219_FROM.get(api_key, 0)


def bounded_fetch(quotas: ClientQuotas, request: Request) -> Request:
    """A consumer's fetch asks no more than its quota window holds (Kafka's
    ``getMaxValueInQuotaWindow``)."""
    cap = quotas.fetch_max_bytes
    body = request.body
    if cap is None or body.max_bytes <= cap or getattr(body, "replica_id", -1) >= 0:
        return request
    return dataclasses.replace(request, body=dataclasses.replace(body, max_bytes=cap))


class Charge:
    """One request's cost, recorded once its answer is ready."""

    __slots__ = ("quotas", "api_key", "request", "request_bytes", "started", "handler_s",
                 "settled")

    def __init__(self, quotas: ClientQuotas, api_key: int, request: Request,
                 request_bytes: int) -> None:
        self.quotas = quotas
        self.api_key = api_key
        self.request = request
        self.request_bytes = request_bytes
        self.started = perf_counter()
        self.handler_s: float | None = None
        # The throttle time once recorded (a fetch records itself before it answers).
        self.settled: int | None = None

    def handled(self) -> None:
        """The handler has returned (an acks=all produce's wait for the followers is not
        handler time)."""
        if self.handler_s is None:
            self.handler_s = perf_counter() - self.started

    def fetch_answer(self, size: int, now_ms: float) -> int:
        """Record a consumer's fetch answer of ``size`` bytes and the handler's time so
        far, before the answer is committed; over either quota, take the bytes back (the
        fetch is answered empty) and return the throttle time."""
        throttle = self.settled = self._record(size, now_ms)
        if throttle and self.quotas.fetch is not None:
            self.quotas.fetch.unrecord(size, now_ms)
        return throttle

    def throttle_ms(self, result: Any, now_ms: float) -> int:
        """Record the request against the client's quotas (unless it recorded itself);
        the throttle time it earned."""
        if self.settled is not None:
            return self.settled
        size = None
        if self.api_key == ApiKey.FETCH and result is not None:
            size = sum(len(c) if isinstance(c, bytes) else c.length for c in result.chunks)
        return self._record(size, now_ms)

    def _record(self, fetch_bytes: int | None, now_ms: float) -> int:
        quotas, api_key, body = self.quotas, self.api_key, self.request.body
        if api_key in _EXEMPT or (api_key == ApiKey.FETCH and getattr(body, "replica_id", -1) >= 0):
            return 0
        throttle = 0
        if api_key == ApiKey.PRODUCE and quotas.produce is not None:
            throttle = quotas.produce.record(self.request_bytes, now_ms)
        elif api_key == ApiKey.FETCH and quotas.fetch is not None and fetch_bytes is not None:
            throttle = quotas.fetch.record(fetch_bytes, now_ms)
        elif api_key in MUTATIONS and quotas.mutation is not None:
            throttle = quotas.mutation.throttle_ms(now_ms)
        if quotas.request is not None and not (api_key == ApiKey.PRODUCE and body.acks == 0):
            self.handled()
            assert self.handler_s is not None
            throttle = max(throttle, quotas.request.record(
                self.handler_s * PERCENT_PER_SECOND, now_ms, quotas.max_request_throttle_ms))
        return throttle


# The APIs answered in one pre-encoded frame, and how each sets its throttle time.
_PATCH_FRAME: dict[int, Callable[[bytes, int, int], bytes]] = {
    ApiKey.METADATA: metadata_with_throttle, ApiKey.PRODUCE: produce_with_throttle}


def with_throttle(api_key: int, version: int, result: Any, throttle_ms: int) -> Any:
    """The answer with its ``throttle_time_ms`` set (None, for no answer, stays None)."""
    if isinstance(result, RawResponse):  # the APIs answered in pre-encoded chunks
        if api_key in _PATCH_FRAME:
            (frame,) = result.chunks
            assert isinstance(frame, bytes)
            return RawResponse([_PATCH_FRAME[api_key](frame, version, throttle_ms)])
        assert api_key == ApiKey.FETCH
        return RawResponse(fetch_with_throttle(result.chunks, version, throttle_ms))
    if result is None or not hasattr(result, "throttle_time"):
        return result
    return dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
