"""Measuring clients against their quotas and throttling them, as Kafka's ClientQuotaManager does.

Per quota type (produce bytes, fetch bytes, request time) a client's usage is recorded in a ``Rate``
shared by every client with the same tags (``entities.precedence``). When a request pushes the rate
over the bound, the throttle is the time that brings the rate back to it if nothing more were
recorded, ``(rate - bound) / bound * window`` (KIP-13); the response carries it in
``throttle_time_ms`` and the connection stops reading for that long once the response has left for
the socket (KIP-219: the broker mutes the channel, so a client that ignores the field is held too).

- Produce: the request's size, recorded when the response is ready (acks=0: muted at once).
- Fetch: the response's record bytes; a throttled fetch returns no data (and its bytes are taken back
  off the rate), as Kafka's; a fetch asks for at most what the quota allows in a window.
- request_percentage: the time the request's handler ran on the reactor, as a percentage of one
  thread, throttled at most one window (Kafka's ClientRequestQuotaManager); ApiVersions and the SASL
  exchange are exempt.

Cost: with no quota configured the connection tests one attribute (``active``) and calls the handler
as before. With quotas, a client's limits are resolved once per (user, client id) and cached until
the quotas change; each request then does a few arithmetic steps, none per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime

from millrace.gateway.kafka.outcome import NO_RESPONSE, Outcome
from millrace.gateway.kafka.quotas.entities import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Limit,
    Tags,
    resolve,
)
from millrace.gateway.kafka.quotas.table import Quotas, QuotaTable
from millrace.store.tables import TableStore

DEFAULT_WINDOW_NUM = 11  # quota.window.num
DEFAULT_WINDOW_SECONDS = 1.0  # quota.window.size.seconds
PRODUCE, FETCH = 0, 1
# Not measured against request_percentage: the exchange a client needs before it can do anything
# (ApiVersions, SaslHandshake, SaslAuthenticate) and requests between cluster nodes (WriteTxnMarkers).
EXEMPT_APIS = frozenset({18, 17, 36, 27})
_NANOS_TO_PERCENT = 100.0 / 1e9
_PRUNE_AT = 10_000  # rates kept before those idle past the window are dropped


class Rate:
    """Kafka's ``Rate`` over a ``WindowedSum``: ``samples`` windows of ``window_ms``, plus the one
    overlapping the start (kept until no event of it is in the window), per second. While less than
    ``samples - 1`` whole windows have passed, the elapsed time counts as that many, so a new client
    is not judged by its first burst."""

    __slots__ = ("_current", "_samples", "num", "window_ms")

    def __init__(self, num: int = DEFAULT_WINDOW_NUM, window_ms: float = DEFAULT_WINDOW_SECONDS * 1000) -> None:
        self.num = num
        self.window_ms = window_ms
        self._samples: list[list[float]] = []  # [start ms, last event ms, value]
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        samples = self._samples
        if not samples:
            samples.append([now_ms, now_ms, 0.0])
        sample = samples[self._current]
        if now_ms - sample[0] >= self.window_ms:
            self._current = (self._current + 1) % (self.num + 1)
            if self._current >= len(samples):
                sample = [now_ms, now_ms, 0.0]
                samples.append(sample)
            else:
                sample = samples[self._current]
                sample[0] = sample[1] = now_ms
                sample[2] = 0.0
        sample[2] += value
        sample[1] = now_ms

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        for sample in self._samples:
            if now_ms - sample[1] >= expire:
                sample[0] = sample[1] = now_ms
                sample[2] = 0.0

    def window(self, now_ms: float) -> float:
        """The time (ms) the rate is measured over."""
        self._purge(now_ms)
        oldest = min((s[0] for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Per second, over ``window``."""
        window = self.window(now_ms)
        return sum(s[2] for s in self._samples) / (window / 1000.0)

    def idle(self, now_ms: float) -> bool:
        """Nothing recorded within the window: the rate reads as if new (safe to forget)."""
        return all(now_ms - s[1] >= self.num * self.window_ms for s in self._samples)


def record_and_throttle(rate: Rate, bound: float, value: float, now_ms: float, max_ms: float | None = None) -> int:
    """Kafka's ``recordAndGetThrottleTimeMs``: record ``value``; if the rate is then over ``bound``,
    the milliseconds (QuotaUtils.throttleTime, capped at ``max_ms``) that bring it back, else 0."""
    rate.record(value, now_ms)
    window = rate.window(now_ms)
    observed = sum(s[2] for s in rate._samples) / (window / 1000.0)  # noqa: SLF001 - measure() without a second purge
    if observed <= bound:
        return 0
    throttle = (observed - bound) / bound * window
    if max_ms is not None:
        throttle = min(throttle, max_ms)
    return round(throttle)


@dataclass(frozen=True)
class ClientLimits:
    """The quotas that apply to one (user, client id), each with the rate it is measured by."""

    produce: tuple[Rate, float] | None
    fetch: tuple[Rate, float] | None
    request: tuple[Rate, float] | None


_UNLIMITED = ClientLimits(None, None, None)


class ClientQuotas:
    """The broker's quotas (``table``) and their enforcement (``handle``, called by the connection)."""

    def __init__(self, tables: TableStore, clock: IReactorTime | None = None,
                 window_num: int = DEFAULT_WINDOW_NUM, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        self.table = QuotaTable(tables)
        self.window_num = window_num
        self.window_ms = window_seconds * 1000.0
        self._clock = clock
        # Whether any quota is configured: the one thing a request tests when none is.
        self.active = False
        self.table.listeners.append(self._changed)
        self._seen: Quotas | None = None
        self._limits: dict[tuple[str, str], ClientLimits] = {}
        self._rates: dict[tuple[str, Tags], Rate] = {}

    def load(self) -> None:
        """Blocking: read the quotas from their table."""
        self.table.load()

    def _changed(self, quotas: Quotas) -> None:
        # Any thread (a worker writes or reloads the table): only flags; the reactor rebuilds what it caches.
        self.active = bool(quotas)

    def _now(self) -> float:
        return (self._clock.seconds() if self._clock is not None else time.time()) * 1000.0

    def limits(self, user: str, client_id: str) -> ClientLimits:
        """Reactor: the client's limits, cached until the quotas change."""
        quotas = self.table.quotas
        if quotas is not self._seen:
            self._seen = quotas
            self._limits = {}
        cached = self._limits.get((user, client_id))
        if cached is None:
            cached = self._limits[(user, client_id)] = self._resolve(quotas, user, client_id)
        return cached

    def _resolve(self, quotas: Quotas, user: str, client_id: str) -> ClientLimits:
        def bound(key: str) -> tuple[Rate, float] | None:
            limit: Limit | None = resolve(quotas, key, user, client_id)
            if limit is None:
                return None
            rate = self._rates.get((key, limit.tags))
            if rate is None:
                if len(self._rates) >= _PRUNE_AT:
                    self._prune()
                rate = self._rates[(key, limit.tags)] = Rate(self.window_num, self.window_ms)
            return rate, limit.bound

        limits = ClientLimits(bound(PRODUCER_BYTE_RATE), bound(CONSUMER_BYTE_RATE), bound(REQUEST_PERCENTAGE))
        return _UNLIMITED if limits == _UNLIMITED else limits

    def _prune(self) -> None:
        """Forget rates with nothing in their window (they read as new ones would) and the cached limits
        that hold them, as Kafka expires idle clients' sensors."""
        now = self._now()
        self._rates = {k: r for k, r in self._rates.items() if not r.idle(now)}
        self._limits = {}

    def max_fetch_bytes(self, bound: float) -> int:
        """Kafka's ``getMaxValueInQuotaWindow``: the most a fetch may return without being throttled
        whatever came before."""
        return int(bound * (self.window_num - 1) * self.window_ms / 1000.0)

    def handle(self, ctx: Any, handle: Callable[[Any, Any], Outcome], request: Any, size: int,
               mute_until: Callable[[float], None]) -> Outcome:
        """Run ``handle(ctx, request)`` for a request of ``size`` bytes, measured against the quotas of
        its principal and client id; the throttle goes into the response and ``mute_until(deadline)``
        (reactor seconds) is called once the response has left (at once when there is none)."""
        limits = self.limits(ctx.principal.name, ctx.client_id or "")
        if limits is _UNLIMITED:
            return handle(ctx, request)
        api_key = ctx.api_key
        if api_key == FETCH and limits.fetch is not None and ctx.api_version >= 3:
            request.max_bytes = max(1, min(request.max_bytes, self.max_fetch_bytes(limits.fetch[1])))
        started = time.perf_counter_ns()
        outcome = handle(ctx, request)
        busy_ns = time.perf_counter_ns() - started
        if isinstance(outcome, defer.Deferred):
            return outcome.addCallback(self._throttle, ctx, request, limits, size, busy_ns, mute_until)
        return self._throttle(outcome, ctx, request, limits, size, busy_ns, mute_until)

    def _throttle(self, response: Any, ctx: Any, request: Any, limits: ClientLimits, size: int, busy_ns: int,
                  mute_until: Callable[[float], None]) -> Any:
        now = self._now()
        api_key = ctx.api_key
        throttle = 0
        # Kafka does not hold an acks=0 produce to the request quota.
        if limits.request is not None and api_key not in EXEMPT_APIS and response is not NO_RESPONSE:
            rate, bound = limits.request
            throttle = record_and_throttle(rate, bound, busy_ns * _NANOS_TO_PERCENT, now, self.window_ms)
        if api_key == PRODUCE and limits.produce is not None:
            rate, bound = limits.produce
            throttle = max(throttle, record_and_throttle(rate, bound, size, now))
        elif api_key == FETCH and limits.fetch is not None:
            rate, bound = limits.fetch
            returned = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
            fetch_throttle = record_and_throttle(rate, bound, returned, now)
            if max(throttle, fetch_throttle) > 0:
                # A throttled fetch returns nothing, and what it would have returned is not counted.
                rate.record(-returned, now)
                response.responses = []
            throttle = max(throttle, fetch_throttle)
        if throttle <= 0:
            return response
        deadline = now / 1000.0 + throttle / 1000.0
        if response is NO_RESPONSE:
            mute_until(deadline)
            return response
        if hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle)
        ctx.when_sent(lambda: mute_until(deadline))
        return response

    def __repr__(self) -> str:
        return f"ClientQuotas(active={self.active}, {self.table!r})"
