"""Client quotas enforced as Kafka's ClientQuotaManager does: measured rates, and how
long a client over its quota must wait.

Each quota (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) is
measured by a :class:`Rate` over ``quota.window.num`` samples of
``quota.window.size.seconds`` (Kafka's 11 of 1 s), shared by the clients the entity
that sets it covers (:mod:`gregor.security.quota_entities`). A request is recorded
first; if the rate is then above the bound, the client is throttled for as long as the
rate needs to fall back to it: ``(rate - bound) / bound * window``, Kafka's formula.

The broker asks :meth:`QuotaManager.for_client` only while some quota is set (``active``),
and a connection keeps the answer until the quotas change, so a broker without
quotas does nothing per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gregor.security.quota_entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    AppliedQuota,
    QuotaConfigs,
)

# Kafka drops the rates of clients idle this long (its inactive sensor expiration).
_IDLE_EXPIRY_MS = 3600 * 1000
# The rates (and buckets) are swept for idle ones each time this many more exist than
# after the last sweep.
_SWEEP_EVERY = 1024
_Key = tuple[str, str, str]
_Kept = TypeVar("_Kept", "Rate", "TokenBucket")
# request_percentage: seconds of handler time in percent of one thread's second.
PERCENT_PER_SECOND = 100.0


class Rate:
    """Kafka's sampled ``Rate``: the total of the live samples over the time they span,
    counted as at least ``samples - 1`` whole windows (so a new client's first burst is
    spread over that long, not over the few milliseconds it took)."""

    __slots__ = ("_samples", "_count", "_window_ms", "last_ms")

    def __init__(self, samples: int, window_ms: float) -> None:
        self._samples: deque[list[float]] = deque()  # [start ms, total]
        self._count = samples
        self._window_ms = window_ms
        self.last_ms = 0.0

    def record(self, value: float, now_ms: float) -> None:
        samples = self._samples
        if not samples or now_ms >= samples[-1][0] + self._window_ms:
            samples.append([now_ms, 0.0])
            if len(samples) > self._count:
                samples.popleft()
        samples[-1][1] += value
        self.last_ms = now_ms

    def window_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        elapsed = now_ms - self._samples[0][0] if self._samples else 0.0
        full = int(elapsed // self._window_ms)
        if full < self._count - 1:
            elapsed += (self._count - 1 - full) * self._window_ms
        return max(elapsed, 1.0)

    def per_second(self, now_ms: float) -> float:
        window = self.window_ms(now_ms)
        return sum(total for _, total in self._samples) * 1000.0 / window

    def _purge(self, now_ms: float) -> None:
        """Forget samples that started as long ago as all the windows together span."""
        samples = self._samples
        horizon = now_ms - self._count * self._window_ms
        while samples and samples[0][0] <= horizon:
            samples.popleft()


@dataclass(frozen=True, slots=True)
class Quota:
    """One quota a client is held to: its bound and the rate it is measured by."""

    bound: float
    rate: Rate

    def record(self, value: float, now_ms: float, max_throttle_ms: float | None = None) -> int:
        """Record ``value``; the throttle time it earns (0 while within the bound), at most
        ``max_throttle_ms`` if given."""
        rate = self.rate
        rate.record(value, now_ms)
        window = rate.window_ms(now_ms)
        measured = rate.per_second(now_ms)
        if measured <= self.bound:
            return 0
        throttle = (measured - self.bound) / self.bound * window
        return int(throttle if max_throttle_ms is None else min(throttle, max_throttle_ms))

    def unrecord(self, value: float, now_ms: float) -> None:
        """Take back a recorded ``value`` (Kafka's ``unrecordQuotaSensor``: what was
        recorded for an answer that is not sent)."""
        self.rate.record(-value, now_ms)


class TokenBucket:
    """Kafka's ``TokenBucket`` for ``controller_mutation_rate`` (KIP-599): a burst of
    ``samples`` windows' worth of partition mutations, refilled at the bound per second;
    mutations taken beyond it are owed, and the client waits until the debt is paid."""

    __slots__ = ("bound", "_burst", "_tokens", "_last_ms")

    def __init__(self, bound: float, burst: float, now_ms: float) -> None:
        self.bound = bound
        self._burst = burst
        self._tokens = burst
        self._last_ms = now_ms

    def exceeded(self, now_ms: float) -> bool:
        """Whether the client owes mutations: a strict request is then refused."""
        self._refill(now_ms)
        return self._tokens < 0

    def record(self, mutations: int, now_ms: float) -> None:
        self._refill(now_ms)
        self._tokens -= mutations

    def throttle_ms(self, now_ms: float) -> int:
        """How long until the debt is paid (0 without one)."""
        self._refill(now_ms)
        return int(-self._tokens / self.bound * 1000) if self._tokens < 0 else 0

    def forgettable(self, now_ms: float) -> bool:
        """Idle as long as Kafka keeps an unused sensor, and full again: a new bucket
        starts full, so forgetting this one changes nothing (one still in debt is kept,
        or its client would be let off what it owes)."""
        idle_ms = now_ms - self._last_ms
        return (idle_ms > _IDLE_EXPIRY_MS
                and self._tokens + idle_ms / 1000 * self.bound >= self._burst)

    def _refill(self, now_ms: float) -> None:
        elapsed = max(now_ms - self._last_ms, 0.0)
        self._tokens = min(self._burst, self._tokens + elapsed / 1000 * self.bound)
        self._last_ms = now_ms


@dataclass(frozen=True, slots=True)
class ClientQuotas:
    """The quotas one client (a principal with a client id) is held to; None for those
    no entity sets for it."""

    produce: Quota | None
    fetch: Quota | None
    request: Quota | None
    # A request-time throttle is at most this long; a byte rate's is not (as in Kafka,
    # whose bytes throttles make up for all the bytes, however many).
    max_request_throttle_ms: float
    # The most a fetch may return (Kafka's quota window bytes): a consumer's answer
    # otherwise outgrows what one throttle can make up for.
    fetch_max_bytes: int | None
    # controller_mutation_rate: partitions created or deleted (KIP-599).
    mutation: TokenBucket | None = None


class QuotaManager:
    """The broker's rates, and which of them each client is measured by."""

    def __init__(self, configs: Callable[[], QuotaConfigs], samples: int,
                 window_s: float, mutation_window_s: float = 11.0) -> None:
        self._configs = configs
        self._samples = samples
        self._window_ms = window_s * 1000.0
        self._mutation_window_s = mutation_window_s
        self._rates: dict[_Key, Rate] = {}
        self._buckets: dict[_Key, TokenBucket] = {}
        self._rates_swept_at = 0
        self._buckets_swept_at = 0
        self._forgotten = 0  # sweeps that forgot something
        # Kafka bounds a request-time throttle by the span of all its samples.
        self.max_request_throttle_ms = samples * self._window_ms

    @property
    def active(self) -> bool:
        """Whether any quota is set at all: without one, no request is measured."""
        return bool(self._configs().entities)

    @property
    def version(self) -> int:
        """Changes when the quotas change or a sweep forgot rates or buckets (both only
        count up, so their sum does): a connection then resolves its quotas again
        rather than keep measuring against a forgotten rate or bucket that its entity's
        other clients no longer share."""
        return self._configs().version + self._forgotten

    @property
    def tracked(self) -> int:
        """How many rates and token buckets are kept: one per entity that clients
        share, or per client, until it has been idle long enough to be swept."""
        return len(self._rates) + len(self._buckets)

    def for_client(self, user: str, client_id: str, now_ms: float) -> ClientQuotas | None:
        """The quotas the client is held to now; None when none applies."""
        configs = self._configs()
        produce, fetch, request = (
            self._quota(configs.applied(key, user, client_id), now_ms)
            for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE))
        mutation = self._bucket(configs.applied(CONTROLLER_MUTATION_RATE, user, client_id),
                                now_ms)
        if produce is None and fetch is None and request is None and mutation is None:
            return None
        window_bytes = (None if fetch is None else
                        max(1, int(fetch.bound * (self._samples - 1) * self._window_ms / 1000)))
        return ClientQuotas(produce, fetch, request, self.max_request_throttle_ms,
                            window_bytes, mutation)

    def _bucket(self, applied: AppliedQuota | None, now_ms: float) -> TokenBucket | None:
        """The token bucket the entity's clients share; a new one if its bound changed."""
        if applied is None:
            return None
        bucket = self._buckets.get(applied.shared_by)
        if bucket is None and len(self._buckets) >= self._buckets_swept_at + _SWEEP_EVERY:
            self._buckets_swept_at = self._sweep(self._buckets,
                                                 lambda b: b.forgettable(now_ms))
        if bucket is None or bucket.bound != applied.bound:
            bucket = self._buckets[applied.shared_by] = TokenBucket(
                applied.bound, applied.bound * self._mutation_window_s, now_ms)
        return bucket

    def _quota(self, applied: AppliedQuota | None, now_ms: float) -> Quota | None:
        if applied is None:
            return None
        rate = self._rates.get(applied.shared_by)
        if rate is None and len(self._rates) >= self._rates_swept_at + _SWEEP_EVERY:
            self._rates_swept_at = self._sweep(
                self._rates, lambda r: now_ms - r.last_ms > _IDLE_EXPIRY_MS)
        if rate is None:
            rate = self._rates[applied.shared_by] = Rate(self._samples, self._window_ms)
            rate.last_ms = now_ms
        return Quota(applied.bound, rate)

    def _sweep(self, kept: dict[_Key, _Kept], idle: Callable[[_Kept], bool]) -> int:
        """Forget the rates or buckets of clients idle for an hour, as Kafka expires
        their sensors: only once enough new ones came since the last sweep, so that
        sweeping costs nothing per request. How many are left."""
        forgotten = [key for key, value in kept.items() if idle(value)]
        for key in forgotten:
            del kept[key]
        if forgotten:
            self._forgotten += 1
        return len(kept)
