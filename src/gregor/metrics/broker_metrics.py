"""The counters the broker's hot path adds to: plain Python numbers, read at scrape time.

A prometheus_client ``Counter.inc`` takes a lock per call; a produce or fetch here adds
to an attribute or a list slot instead, since the event loop is the only writer and
the scrape runs on that same loop. Counts come from what the broker has at hand
anyway: a batch header's record count, a batch's or a file region's size, the error
code of each answer, never from decoding records.

Each partition appended to is counted as it happens, in place. A request answered is
counted :data:`FOLD_EVERY` at a time (and before each scrape): its arguments are kept
in a list, then folded into the histograms in one loop. Instructions are not the
measure here: callgrind (2026-11-28, 400 of ``bench.saturate``'s produce requests of
100 B) counted fewer in place, yet in place is slower. Timed inside the broker under
that load, counting one request in place took a mean 5.0 us (median 4.6), where
``timeit`` gives 0.65 us: between two requests the loop moves 128 KiB and serves other
connections, and the counters' objects and code have left the caches by the next one.
Folded, a request cost a mean 3.0 us there, the fold paying the caches once for 32.
Side by side (``bench.metrics_bench``'s runs of produce 100 B, 2026-11-28), metrics on
against off cost -2.4% [-3.0%, -1.8%] counted in place (the bench's full run), and in
scratch runs of 16, -1.1% [-2.0%, -0.3%] folded, -0.0% [-1.2%, +0.8%] with requests
not counted at all (everything else on). Folding only every half second, as once before,
held thousands of tuples, whose allocations set off the garbage collector; 32 are far
from the 700 that set off one.
"""

from __future__ import annotations

import bisect
import operator
from collections import defaultdict
from collections.abc import Iterable, Sequence

from gregor.metrics import names
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.fetch_response import FetchedPartition

# Errors Kafka does not count as failed produce or fetch requests (ReplicaManager's
# appendToLocalLog and readFromLog): the client's to handle (a moved leader, an unknown
# partition, an offset out of range), not the broker's failures.
# Plain ints, as the hot path's keys and codes are (an enum member's hash and equality
# go through Python code).
PRODUCE_NOT_FAILED = frozenset(map(int, (
    ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error, ErrorCode.invalid_topic_exception)))
FETCH_NOT_FAILED = frozenset(map(int, (
    ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch,
    ErrorCode.replica_not_available, ErrorCode.kafka_storage_error,
    ErrorCode.offset_out_of_range, ErrorCode.inconsistent_topic_id)))
PRODUCE = int(ApiKey.PRODUCE)
NONE = int(ErrorCode.none)
FETCH = int(ApiKey.FETCH)
# Requests answered that are counted together (see the module's doc): few enough that
# the tuples held never set off a garbage collection (700 allocations do).
FOLD_EVERY = 32
# Kafka's request times run from well under a millisecond (metadata) to the
# max.wait of a long-polling fetch (500 ms by default) and the timeouts of joins.
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                   1000.0, 2500.0, 5000.0, 10000.0, 30000.0)


class Histogram:
    """The buckets of :data:`TIME_BUCKETS_MS`, counted per bucket (not cumulative: made
    so at scrape time)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(TIME_BUCKETS_MS) + 1)  # the last one is +Inf
        self.total = 0.0


class TopicCounters:
    """A topic's BrokerTopicMetrics (produce and fetch requests: one per partition asked)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "failed_produces",
                 "fetch_requests", "failed_fetches")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.failed_produces = 0
        self.fetch_requests = 0
        self.failed_fetches = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, field) for field in self.__slots__)


class RequestCounters:
    """One API's RequestMetrics: requests by version, answers by error, times in ms."""

    __slots__ = ("by_version", "errors", "total_time", "queue_time")

    def __init__(self) -> None:
        self.by_version: defaultdict[int, int] = defaultdict(int)
        self.errors: defaultdict[int, int] = defaultdict(int)
        self.total_time = Histogram()
        self.queue_time = Histogram()


class BrokerMetrics:
    """What happened on this broker since it started, by topic and by API."""

    def __init__(self) -> None:
        self.topics: defaultdict[str, TopicCounters] = defaultdict(TopicCounters)
        # What deleted topics counted: still part of the broker's totals.
        self.retired = TopicCounters()
        self.replication_bytes_out = 0
        self.requests: defaultdict[str, RequestCounters] = defaultdict(RequestCounters)
        # By API key, so the hot path never builds a name.
        self._by_key: dict[int, RequestCounters] = {}
        # Requests answered and not yet counted, as request_completed's arguments.
        self._completed: list[tuple[int, int, bool, float, float, float]] = []
        self._fetch_consumer = self.requests[names.FETCH_CONSUMER]
        self._fetch_follower = self.requests[names.FETCH_FOLLOWER]
        # Counted per partition: their own references, looked up once.
        self.produce_errors = self.for_api(PRODUCE).errors
        self.fetch_errors = self.for_api(FETCH).errors

    def for_api(self, api_key: int) -> RequestCounters:
        counters = self._by_key.get(api_key)
        if counters is None:
            counters = self._by_key[api_key] = self.requests[names.request_name(api_key)]
        return counters

    def appended(self, topic: str, records: int, size: int) -> None:
        """A partition of a produce request appended to (0 records and bytes: a duplicate
        batch), counted as Kafka's ReplicaManager counts appends, whatever the acks."""
        counters = self.topics[topic]
        counters.produce_requests += 1
        counters.messages_in += records
        counters.bytes_in += size

    def produce_refused(self, topic: str, error: int) -> None:
        """A partition of a produce request not appended to: a produce request, and a
        failed one if refused for the broker's reasons (not a refusal the client is to
        handle, nor an error once appended, such as a replication timeout)."""
        counters = self.topics[topic]
        counters.produce_requests += 1
        if error not in PRODUCE_NOT_FAILED:
            counters.failed_produces += 1

    # ------------------------------------------------------------- requests
    def request_completed(self, api_key: int, version: int, follower_fetch: bool,
                          received_s: float, started_s: float, done_s: float) -> None:
        """One request answered (or, for acks=0, handled): ``received_s`` when its last
        byte arrived, ``started_s`` when its handler began, ``done_s`` once its answer
        was written out (``time.perf_counter`` seconds). Counted with the next
        :data:`FOLD_EVERY` - 1 others (or at the next scrape), see the module's doc."""
        completed = self._completed
        completed.append((api_key, version, follower_fetch, received_s, started_s, done_s))
        if len(completed) >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        """Count the requests answered since the last fold."""
        by_key, buckets, bisect_left = self._by_key, TIME_BUCKETS_MS, bisect.bisect_left
        for api_key, version, follower_fetch, received_s, started_s, done_s in self._completed:
            if api_key == FETCH:
                # Fetch's own requests and times are these two's sum, added at scrape
                # time (as_scraped) rather than counted a second time here.
                counters = self._fetch_follower if follower_fetch else self._fetch_consumer
            else:
                counters = by_key.get(api_key) or self.for_api(api_key)
            counters.by_version[version] += 1
            queue_ms = (started_s - received_s) * 1000
            queue = counters.queue_time
            queue.counts[bisect_left(buckets, queue_ms)] += 1
            queue.total += queue_ms
            total_ms = (done_s - received_s) * 1000
            total = counters.total_time
            total.counts[bisect_left(buckets, total_ms)] += 1
            total.total += total_ms
        self._completed.clear()

    def as_scraped(self) -> dict[str, RequestCounters]:
        """Every API's counters by name, Fetch's requests and times being its consumer
        and follower fetches' together (its errors are its own: counted per partition)."""
        self._fold()
        scraped = dict(self.requests)
        fetch = RequestCounters()
        fetch.errors = self.fetch_errors
        for part in (self._fetch_consumer, self._fetch_follower):
            for version, count in part.by_version.items():
                fetch.by_version[version] += count
            for mine, theirs in ((fetch.total_time, part.total_time),
                                 (fetch.queue_time, part.queue_time)):
                mine.counts = list(map(operator.add, mine.counts, theirs.counts))
                mine.total += theirs.total
        scraped[names.request_name(FETCH)] = fetch
        return scraped

    def answered(self, api_key: int, error_code: int) -> None:
        """An answer's error (NONE too, as Kafka's ErrorsPerSec counts it)."""
        (self._by_key.get(api_key) or self.for_api(api_key)).errors[error_code] += 1

    def produce_failed(self, errors: Iterable[int]) -> None:
        """The errors of a produce request's answer with some partition refused (one
        with none adds its partitions to :attr:`produce_errors` itself)."""
        for error in errors:
            self.produce_errors[error] += 1

    # ---------------------------------------------------------- produce, fetch
    def retire(self, topic: str) -> None:
        """Forget a deleted topic's series (as Kafka removes its BrokerTopicMetrics),
        keeping its counts in the broker's totals, which never go down."""
        counters = self.topics.pop(topic, None)
        if counters is not None:
            for field in TopicCounters.__slots__:
                setattr(self.retired, field,
                        getattr(self.retired, field) + getattr(counters, field))

    def fetch_answered(self, topics: Sequence[tuple[str, Sequence[FetchedPartition]]],
                       follower: bool) -> None:
        """A fetch answered, partition by partition: each one's error, each topic's bytes
        of records sent (to a consumer or a follower). The fetch handler counts one of a
        single topic without errors, as most are, itself."""
        errors = self.fetch_errors
        for topic, answers in topics:
            counters = self.topics[topic]
            counters.fetch_requests += len(answers)
            sent = 0
            for answer in answers:
                code = answer.error_code
                errors[code] += 1
                if code and code not in FETCH_NOT_FAILED:
                    counters.failed_fetches += 1
                records = answer.records
                if records is not None:
                    sent += len(records) if isinstance(records, bytes) else records.length
            if follower:
                self.replication_bytes_out += sent
            else:
                counters.bytes_out += sent
