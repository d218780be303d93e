"""``EventStreamWriter``: events with routing keys, in order per key, exactly once.

Each event becomes a Kafka record (key = routing key) in the partition whose slice holds the key's
hash (``millrace.protocol.events``; docs/architecture.md). Per partition the writer
sends batches in sequence order, each stamped with the writer's producer id, epoch and base sequence,
and keeps at most ``MAX_IN_FLIGHT`` batches unacknowledged: when a connection drops or the partition
asks for a retry, every unacknowledged batch of the partition is sent again, in order, with the same
sequences, and the partition's duplicate window (the last five batches of each producer, durable with
the data) answers a batch that had landed with its original offset. So an event is stored once,
whatever was lost on the way, and events of one key keep their order: one key, one partition, one
sequence. On a cluster each partition's batches go to the owner of its open segment (``routing.py``);
when that node answers WRONG_HOST or its connection dies, the partition forgets it, looks the owner up
again and resends its unacknowledged batches there, in order with the same sequences and event numbers,
so a failover keeps exactly-once and per-key order too. Opening a writer with a writer id bumps that id's
epoch on the server, fencing any older instance of it. A writer whose server stays away for the manager's reconnect timeout gives up: its
unacknowledged events fail with ConnectionLostError and the partitions concerned take no more.

Memory: a sender holds at most ``max_buffered_bytes`` of unacknowledged events; ``write_event`` waits for
room (Kafka's buffer.memory and max.block.ms), so a slow server slows the application instead of
filling its memory.

Threads: ``write_event`` may be called from any thread; completions arrive on connection threads and
retries run on a timer thread; one lock guards the partition states, and futures complete outside it.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from millrace.client import watermarks
from millrace.client.connection import Endpoint, Reply
from millrace.client.controller import ControllerClient
from millrace.client.serializers import BytesSerializer, Serializer
from millrace.protocol import messages as m
from millrace.protocol.errors import (
    ConnectionLostError,
    EventsRefusedError,
    RetriableError,
    SegmentSealedError,
    StreamSealedError,
    WrongHostError,
)
from millrace.protocol.events import OUT_OF_ORDER_SEQUENCE, PARTITION_RETIRED, encode_batch
from millrace.protocol.keys import key_hash
from millrace.protocol.messages import Request, decode_reply

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_IN_FLIGHT = 5  # the server remembers a producer's last five batches per partition
MAX_BATCH_BYTES = 1024 * 1024
# The most one write_events may carry: its events go in one batch, and a stream takes batches up to its
# max.message.bytes (8 MiB by default, as Kafka's).
MAX_ATOMIC_BYTES = 8 * 1024 * 1024
# How many bytes of events a sender holds unacknowledged before ``write_event`` waits for room, and how
# long it waits (Kafka's producer: buffer.memory, 32 MiB, and max.block.ms, 60 s).
DEFAULT_MAX_BUFFERED_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_BLOCK_SECONDS = 60.0
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0)
ROUTED_PATIENCE = 2.0  # a routed partition's owner lookup and connect, per retry
PARTITION_CACHE_KEYS = 100_000
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads consecutive event numbers over [0, 1)

# A queued event: (routing key, data, event number or -1, events that must go in one batch from this one:
# 1 for a lone event, n on the first of write_events' n and 0 on the others). Its future is kept beside
# it (``_Partition.waiting``, ``_Batch.futures``), not in it: a tuple of bytes and ints leaves the
# garbage collector's sight at its first collection, and a pipelined writer holds many.
_Event = tuple[bytes | None, bytes, int, int]


class WriterBufferFullError(TimeoutError):
    """The writer's buffer held ``max_buffered_bytes`` of unacknowledged events for ``max_block_seconds``
    (or, with ``block=False``, at the call): the event was not queued. Kafka's BufferExhaustedException."""


def number_hash(number: int) -> float:
    """Where in the key space an event without a routing key goes, by its event number: the same place
    each time, so a writer opened again finds where it went (as for a key)."""
    return ((number * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) / 2.0 ** 64


#: The offset of an event written already (its event number is at or below the one the partition's
#: segment records): by an earlier instance of the writer id, or by this one when a resend after a
#: failover finds that the first append landed though its answer was lost. It is not written again, and
#: where it landed is not kept.
ALREADY_WRITTEN = -1


@dataclass(frozen=True)
class EventPosition:
    """Where an event landed: its partition and its offset there (the Kafka offset), or
    ``ALREADY_WRITTEN`` for an event written before (by an earlier instance of the writer id, or by a
    first attempt whose answer a failover lost)."""

    partition: int
    offset: int

    @property
    def already_written(self) -> bool:
        return self.offset == ALREADY_WRITTEN


_CONDITIONS = threading.Lock()  # makes each _EventFuture's Condition at most once


class _EventFuture(Future[EventPosition]):
    """The future of one event: a ``concurrent.futures.Future`` that makes its ``threading.Condition``
    only once something waits on it. A busy writer's events mostly complete before anyone waits (a
    callback or ``flush`` looks at them), and a Condition per event was the writer's largest cost per
    event. Without a Condition, completing and adding a callback hold ``_CONDITIONS``, the lock the
    Condition is made under, so a waiter arriving meanwhile either finds the outcome or is notified and
    every callback runs once. An event once written cannot be cancelled.

    Making one sets nothing: every field starts as a class default (no per-event lists for waiters and
    callbacks, which the garbage collector would also walk while a pipelined writer holds many), and
    the lists are made when the first waiter or callback arrives. Its outcome is kept as a partition
    and an offset, and the ``EventPosition`` made when asked for: one object fewer per event."""

    _lazy_condition: threading.Condition | None = None
    _state = PENDING
    _partition = 0
    _offset: int | None = None  # set with _partition once the event landed
    _exception: BaseException | None = None
    _waiters: list[Any] = []  # noqa: RUF012 - never appended to: replaced with the Condition (below)
    _done_callbacks: list[Callable[[Future[EventPosition]], object]] = []  # noqa: RUF012 - as _waiters

    def __init__(self) -> None:  # not Future.__init__: that makes the Condition and the lists
        pass

    @property
    def _condition(self) -> threading.Condition:
        if self._lazy_condition is None:
            with _CONDITIONS:
                if self._lazy_condition is None:
                    # Future's own code (waiters of concurrent.futures.wait, set_result) takes over from
                    # here, with lists of this future's own.
                    self._waiters = []
                    self._done_callbacks = list(self._done_callbacks)
                    self._lazy_condition = threading.Condition()
        return self._lazy_condition

    @_condition.setter
    def _condition(self, condition: threading.Condition) -> None:
        self._lazy_condition = condition

    @property
    def _result(self) -> EventPosition | None:  # what Future's own code reads and sets
        return None if self._offset is None else EventPosition(self._partition, self._offset)

    @_result.setter
    def _result(self, position: EventPosition | None) -> None:
        if position is not None:
            self._partition, self._offset = position.partition, position.offset

    def complete(self, outcome: EventPosition | BaseException) -> None:
        """``set_result`` or ``set_exception``; without a Condition while nobody made one."""
        with _CONDITIONS:
            quiet = self._lazy_condition is None
            if quiet:
                if isinstance(outcome, BaseException):
                    self._exception = outcome
                else:
                    self._result = outcome
                self._state = FINISHED  # after the outcome: a reader without the lock checks the state first
        if quiet:
            self.run_callbacks()
        elif isinstance(outcome, BaseException):
            self.set_exception(outcome)
        else:
            self.set_result(outcome)

    def run_callbacks(self) -> None:
        """The callbacks added before a quiet completion: each runs once, as callbacks added from now
        on run at once (the future is finished)."""
        for callback in self._done_callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    def add_done_callback(self, fn: Callable[[Future[EventPosition]], object]) -> None:
        with _CONDITIONS:
            if self._lazy_condition is None and self._state != FINISHED:
                self._done_callbacks = [*self._done_callbacks, fn]  # never the shared class default
                return
        super().add_done_callback(fn)

    def cancel(self) -> bool:
        return False

    # FINISHED is final, so a finished future answers without its Condition.
    def done(self) -> bool:
        return self._state == FINISHED or super().done()

    def result(self, timeout: float | None = None) -> EventPosition:
        if self._state == FINISHED:
            if self._exception is not None:
                raise self._exception
            position = self._result
            assert position is not None  # a FINISHED future without an exception has landed
            return position
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)


def _complete_landed(futures: list[_EventFuture], partition: int, base: int) -> None:
    """Complete a landed batch's futures with their positions (``base``: the first event's offset, or
    ``ALREADY_WRITTEN``): those nobody waits on under one hold of ``_CONDITIONS`` (as ``complete``
    does one at a time), then their callbacks, then the others through their Conditions."""
    step = 0 if base == ALREADY_WRITTEN else 1
    waited: list[tuple[_EventFuture, int]] = []
    called: list[_EventFuture] = []  # quiet ones with callbacks (decided under the lock: a waiter may come)
    with _CONDITIONS:
        offset = base
        for fut in futures:
            if fut._lazy_condition is None:
                fut._partition = partition
                fut._offset = offset
                fut._state = FINISHED
                if fut._done_callbacks:
                    called.append(fut)
            else:
                waited.append((fut, offset))
            offset += step
    for fut in called:
        fut.run_callbacks()
    for fut, offset in waited:
        fut.set_result(EventPosition(partition, offset))


@dataclass
class _Batch:
    base_sequence: int
    payload: bytes
    size: int  # its events' data and routing keys: what it holds of the sender's buffer
    futures: list[_EventFuture]
    first_event: int  # event numbers (-1: the sender does not number its events)
    last_event: int
    events: list[_Event] = field(default_factory=list)  # as queued: routed again if the partition retires
    # (``futures`` are the events' futures, in the same order)
    outcome: Future[Reply] | None = None  # of the current attempt
    refused_retired: bool = False  # the partition retired before this batch reached it: nothing stored


@dataclass
class _Partition:
    number: int
    next_sequence: int = 0
    pending: deque[_Event] = field(default_factory=deque)
    waiting: deque[_EventFuture] = field(default_factory=deque)  # the pending events' futures, in order
    in_flight: deque[_Batch] = field(default_factory=deque)
    retrying: bool = False  # a batch failed retriably: send nothing new until the resend
    failing_since: float | None = None  # monotonic time of the first failure since the last success
    retry_scheduled: bool = False
    attempts: int = 0
    failed: BaseException | None = None  # a refusal that ends the partition for this writer
    # Until the first batch is acknowledged only one is in flight: a partition that holds no state of
    # this producer yet takes any first sequence (Kafka's rule), so a second batch that arrived after the
    # first had been refused retriably (a node still loading the partition) would land ahead of it, and
    # the first's resend be refused for good as out of sequence (seen on a cluster at a writer's start).
    acknowledged: bool = False
    segment: str | None = None  # the partition's open segment, as last heard (OPEN_WRITER, WRONG_HOST)
    endpoint: Endpoint | None = None  # where its batches go: that segment's owner (None: look it up)
    retired: bool = False  # the stream split inside its slice: it takes no more events (``_drain``)
    reroute: bool = False  # a batch was refused as retired: ask for the stream's routing again
    sealed_seen: bool = False  # its segment was sealed under a batch: a scale, or the stream's seal
    # Retired partitions whose unsent events (older than any here) go first: nothing is sent until then.
    held: set[int] = field(default_factory=set)


class EventSender(Generic[T]):
    """Events of one stream sent as batches per partition with one producer id and epoch: routing,
    sequences, at most ``MAX_IN_FLIGHT`` batches in flight per partition, resends in order after a lost
    connection. Shared by ``EventStreamWriter`` and the transactions of ``client/transactions.py``,
    which differ only in the request a batch goes with (``_request``)."""

    transactional = False
    writer_id = ""  # named in the batches of senders that number their events

    def __init__(self, controller: ControllerClient, scope: str, stream: str, serializer: Serializer[T] | None,
                 producer_id: int, epoch: int, slices: list[tuple[float, float]], label: str,
                 sequences: dict[int, int] | None = None, segments: list[str | None] | None = None,
                 retired: Iterable[int] = (), max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                 max_block_seconds: float = DEFAULT_MAX_BLOCK_SECONDS) -> None:
        """``label`` names the sender in logs; ``sequences``: the next sequence of partitions that have
        some already (a transaction resumed by another process); ``segments``: each partition's open
        segment, whose owner takes its batches (None: the controller endpoint takes them); ``retired``:
        partitions not to route to (a native stream split inside their slices); ``max_buffered_bytes``
        and ``max_block_seconds``: see ``_admit``."""
        if max_buffered_bytes <= 0 or max_block_seconds < 0:
            raise ValueError("max_buffered_bytes must be positive and max_block_seconds not negative")
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self.serializer: Serializer[Any] = serializer if serializer is not None else BytesSerializer()
        self.producer_id = producer_id
        self.epoch = epoch
        self.slices = slices
        self._label = label
        self._partitions = [_Partition(p, (sequences or {}).get(p, 0)) for p in range(len(self.slices))]
        for number in retired:
            self._partitions[number].retired = True
        owners = controller.owners
        if segments is not None:
            owners.prefetch([s for s in segments if s is not None])
            for p, segment in zip(self._partitions, segments, strict=False):
                p.segment = segment
                p.endpoint = None if segment is None else owners.cached(segment)
        self._unkeyed = itertools.cycle(self._live())
        self._routed_keys: dict[str, tuple[int, bytes]] = {}  # routing key -> (partition, its UTF-8)
        # Reentrant: a request that fails (or is answered) at once runs its completion in the sending
        # thread, which holds the lock.
        self._lock = threading.RLock()
        self._closed = False
        # The events' bytes (data and routing key) queued or in flight: taken by _enqueue, given back when
        # their batch lands or their partition fails. Writers wait on _room while it is over the budget.
        self._buffered = 0
        self._max_buffered = self.max_buffered_bytes = max_buffered_bytes
        self.max_block_seconds = max_block_seconds
        self._room = threading.Condition(self._lock)
        # Futures taken out of the partitions and being completed outside the lock (a landed batch's, a
        # failed partition's): flush waits for them too, or it could return before they are marked done.
        self._settling: dict[int, list[_EventFuture]] = {}
        self._settle_tokens = itertools.count()
        self.resent_batches = 0  # batches sent again after a lost connection or a retriable refusal

    def _request(self, p: _Partition, batch: _Batch) -> Request:
        """The request a batch goes with."""
        if batch.first_event < 0:  # the writer still names itself: its producer id is its own lease
            return m.AppendEvents(scope=self.scope, stream=self.stream, partition=p.number, writer_id=self.writer_id)
        return m.AppendEvents(scope=self.scope, stream=self.stream, partition=p.number, writer_id=self.writer_id,
                              first_event=batch.first_event, last_event=batch.last_event)

    def _refuse_writes(self) -> None:
        """Raise if no event may be written now (called under the lock)."""
        if self._closed:
            raise RuntimeError("the writer is closed")

    def _admit(self, size: int, block: bool) -> None:
        """Wait (under the lock, which waiting releases) until ``size`` more bytes fit in the buffer: the
        application's memory stays bounded while the server is slow or away, as Kafka's producer bounds
        it. An event bigger than the whole budget goes alone. WriterBufferFullError after
        ``max_block_seconds`` (at once when not ``block``). Never call a writer from one of its own
        futures' callbacks while it may be full: they run on the threads whose answers make room."""
        if not self._buffered or self._buffered + size <= self._max_buffered:
            return  # the common case: no clock read
        deadline = time.monotonic() + self.max_block_seconds
        while self._buffered and self._buffered + size > self._max_buffered:
            remaining = deadline - time.monotonic()
            if not block or remaining <= 0:
                raise WriterBufferFullError(
                    f"{self._label}: {self._buffered} bytes of events unacknowledged, the most is "
                    f"{self._max_buffered}" + (f"; waited {self.max_block_seconds:g} s" if block else ""))
            self._room.wait(remaining)
            self._refuse_writes()  # closed while waiting

    def _settling_start(self, futures: list[_EventFuture]) -> int:
        """``futures`` leave the partitions to be completed outside the lock; ``flush`` waits for them
        until ``_settled`` (under the lock)."""
        token = next(self._settle_tokens)
        self._settling[token] = futures
        return token

    def _settled(self, token: int) -> None:
        with self._lock:
            del self._settling[token]

    def _complete_failed(self, token: int, doomed: list[tuple[_EventFuture, BaseException]]) -> None:
        """Fail what ``_fail_partition`` took out (outside the lock)."""
        for fut, error in doomed:
            fut.complete(error)
        self._settled(token)

    def _release(self, size: int) -> None:
        """Events of ``size`` bytes landed or failed: their room is free (under the lock)."""
        self._buffered -= size
        self._room.notify_all()

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Wait until the buffer is under its budget (for callers that must not block where they write:
        the asyncio writer); whether it is."""
        with self._lock:
            return self._room.wait_for(lambda: self._buffered < self._max_buffered, timeout)

    @property
    def buffered_bytes(self) -> int:
        """The bytes of events queued or in flight, unacknowledged."""
        return self._buffered

    # -- writing ----------------------------------------------------------------------------------
    def write_event(self, event: T, routing_key: str | None = None, *, block: bool = True) -> Future[EventPosition]:
        """Queue ``event``; the future completes with its position once it is durable (or fails). Waits
        while the buffer is full (``_admit``)."""
        data = self.serializer.serialize(event)
        fut = _EventFuture()
        key = None if routing_key is None else routing_key.encode()
        with self._lock:
            self._refuse_writes()
            self._admit(len(data) + (len(key) if key else 0), block)
            self._enqueue(self._partitions[self._partition_of(routing_key)], key, data, fut, -1)
        return fut

    def _enqueue(self, p: _Partition, key: bytes | None, data: bytes, fut: _EventFuture, number: int) -> None:
        """Queue one event (``key``: its routing key's UTF-8) on its partition (under the lock)."""
        if p.failed is not None:
            fut.complete(p.failed)
            return
        self._buffered += len(data) + (len(key) if key else 0)
        p.pending.append((key, data, number, 1))
        p.waiting.append(fut)
        if len(p.in_flight) < MAX_IN_FLIGHT:  # else nothing to send until an answer comes
            self._pump(p)

    def _enqueue_atomic(self, p: _Partition, routing_key: str, events: list[tuple[bytes, _EventFuture, int]]) -> None:
        """Queue events that go in one batch, so they land all or none, in order (under the lock)."""
        if p.failed is not None:
            for _, fut, _ in events:
                fut.complete(p.failed)
            return
        key = routing_key.encode()
        self._buffered += sum(len(data) + len(key) for data, _, _ in events)
        for i, (data, fut, number) in enumerate(events):
            p.pending.append((key, data, number, len(events) if i == 0 else 0))
            p.waiting.append(fut)
        self._pump(p)

    def flush(self) -> None:
        """Wait until every event written so far is durable; raise the first failure among them."""
        with self._lock:
            outstanding = [f for p in self._partitions for f in itertools.chain(
                p.waiting, (f for b in p.in_flight for f in b.futures))]
            outstanding += itertools.chain.from_iterable(self._settling.values())
        for f in outstanding:
            exc = f.exception()  # waits, one future at a time: the finished ones need no Condition
            if exc is not None:
                raise exc

    def close(self) -> None:
        """Flush, then refuse further events."""
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True


    # -- routing --------------------------------------------------------------------------------------
    def _live(self) -> list[int]:
        """The live partitions, by slice start; ``_live_starts`` is kept beside them for bisecting."""
        live = sorted((self.slices[p.number][0], p.number) for p in self._partitions if not p.retired)
        self._live_starts = [start for start, _ in live]
        self._live_numbers = [number for _, number in live]
        return self._live_numbers

    def _partition_of(self, routing_key: str | None) -> int:
        if routing_key is None:
            return next(self._unkeyed)  # no order to keep: spread
        return self._partition_of_routing_key(routing_key)

    def _partition_of_hash(self, h: float) -> int:
        """The live partition whose slice holds ``h`` (live slices cover [0, 1) without overlapping)."""
        i = bisect.bisect_right(self._live_starts, h) - 1
        if i < 0:
            raise AssertionError(f"the stream's slices do not cover {h}")
        return self._live_numbers[i]

    def _partition_of_event(self, event: _Event) -> int:
        """Where a queued event goes now (routed again when its partition retired)."""
        key, number = event[0], event[2]
        if key is not None:
            return self._partition_of_routing_key(key.decode())
        return self._partition_of(None) if number < 0 else self._partition_of_hash(number_hash(number))

    def _partition_of_routing_key(self, routing_key: str) -> int:
        found = self._routed_keys.get(routing_key)
        return (found or self._route_key(routing_key))[0]

    def _route_key(self, routing_key: str) -> tuple[int, bytes]:
        """The key's partition and its UTF-8, kept: keys repeat (sensors, users, devices), so each is
        hashed and encoded once while the cache is bounded."""
        if len(self._routed_keys) >= PARTITION_CACHE_KEYS:
            self._routed_keys.clear()
        routed = self._routed_keys[routing_key] = (self._partition_of_hash(key_hash(routing_key)), routing_key.encode())
        return routed

    # -- sending (under the lock) ---------------------------------------------------------------------
    def _pump(self, p: _Partition) -> None:
        limit = MAX_IN_FLIGHT if p.acknowledged else 1
        while p.pending and not p.retrying and not p.held and not p.retired and p.failed is None \
                and len(p.in_flight) < limit:
            queued: list[_Event] = []
            futures: list[_EventFuture] = []
            take, took = queued.append, futures.append
            pending, waiting = p.pending, p.waiting
            size = 0
            while pending:
                head = pending[0]
                together = head[3]  # write_events' events: all in this batch or all in the next
                if together == 1:
                    adding = len(head[1]) + (len(head[0]) if head[0] else 0)
                    if queued and size + adding > MAX_BATCH_BYTES:
                        break
                    take(pending.popleft())
                    took(waiting.popleft())
                    size += adding
                    continue
                group = list(itertools.islice(pending, together))
                adding = sum(len(e[1]) + (len(e[0]) if e[0] else 0) for e in group)
                if queued and size + adding > MAX_BATCH_BYTES:
                    break
                for _ in range(together):
                    take(pending.popleft())
                    took(waiting.popleft())
                size += adding
            payload = encode_batch(queued, int(time.time() * 1000), self.producer_id, self.epoch, p.next_sequence,
                                   self.transactional)
            batch = _Batch(p.next_sequence, payload, size, futures, queued[0][2], queued[-1][2], queued)
            p.next_sequence += len(queued)
            p.in_flight.append(batch)
            self._send(p, batch)

    def _send(self, p: _Partition, batch: _Batch) -> None:
        try:
            # Never connect here: this runs under the lock, and the retry reconnects off it.
            outcome = self.controller.pool.request_if_connected(self._endpoint(p), self._request(p, batch),
                                                                batch.payload)
        except ConnectionLostError as exc:
            outcome = Future()
            outcome.set_exception(exc)
        batch.outcome = outcome
        outcome.add_done_callback(lambda f: self._completed(p, batch, f))

    def _endpoint(self, p: _Partition) -> Endpoint:
        """Where the partition's batches go: its segment's owner, else the controller endpoint (a sender
        that routes nothing: a single server, or transactions)."""
        if p.endpoint is None and p.segment is not None:
            p.endpoint = self.controller.owners.cached(p.segment)
        return p.endpoint if p.endpoint is not None else self.controller.endpoint

    # -- completions (connection threads) ----------------------------------------------------------------
    def _completed(self, p: _Partition, batch: _Batch, outcome: Future[Reply]) -> None:
        failed: tuple[int, list[tuple[_EventFuture, BaseException]]] | None = None
        landed: tuple[list[_EventFuture], int, int] | None = None
        with self._lock:
            if batch.outcome is not outcome or batch not in p.in_flight:
                return  # an earlier attempt's answer; the current attempt decides
            exc = outcome.exception()
            if exc is None:
                base = decode_reply(m.OffsetReply, outcome.result()[0]).offset
                p.in_flight.remove(batch)
                self._release(batch.size)
                p.acknowledged = True
                p.attempts = 0
                p.failing_since = None
                landed = (batch.futures, p.number, base)  # completed outside the lock, below
                landed_token = self._settling_start(batch.futures)
                self._pump(p)
                self._drain(p)
            elif isinstance(exc, EventsRefusedError) and exc.reason == PARTITION_RETIRED:
                # Nothing of it was stored: once every batch in flight has its answer, the stream's
                # routing is read again and these events go where their keys belong now (``_retry``).
                batch.refused_retired = True
                p.retrying = p.reroute = True
            elif isinstance(exc, SegmentSealedError):
                # The segment was sealed under the batch (nothing of it stored): a scale made through
                # another cluster node, after which the server points the partition at the successor,
                # or the stream's seal. ``_retry`` asks which before sending again.
                p.retrying = p.sealed_seen = True
                if p.failing_since is None:
                    p.failing_since = time.monotonic()
            elif isinstance(exc, (ConnectionLostError, RetriableError, WrongHostError)) or (
                    # A batch behind one that failed finds a gap in the sequence: ours, not a refusal.
                    isinstance(exc, EventsRefusedError) and exc.reason == OUT_OF_ORDER_SEQUENCE
                    and p.in_flight[0] is not batch):
                p.retrying = True
                if isinstance(exc, (WrongHostError, ConnectionLostError)):
                    # The owner moved (or died): forget it; the retry asks any node for the new one.
                    if isinstance(exc, WrongHostError) and exc.segment:
                        p.segment = exc.segment  # after a scale: the partition's new open segment
                    if p.segment is not None:
                        self.controller.owners.forget(p.segment, p.endpoint)
                    p.endpoint = None
                if p.failing_since is None:
                    p.failing_since = time.monotonic()
            else:
                # Refused for good: later batches of this partition would break the sequence, so they
                # and every later event fail too.
                failed = self._fail_partition(p, exc)
            # Every unacknowledged batch is sent again, in order, once none is outstanding.
            if p.retrying and not p.retry_scheduled and all(
                    b.outcome is not None and b.outcome.done() for b in p.in_flight):
                self._schedule_retry(p)
        if landed is not None:
            _complete_landed(*landed)
            self._settled(landed_token)
        if failed is not None:
            self._complete_failed(*failed)

    def _schedule_retry(self, p: _Partition) -> None:
        delay = RETRY_DELAYS[min(p.attempts, len(RETRY_DELAYS) - 1)]
        p.attempts += 1
        p.retry_scheduled = True
        timer = threading.Timer(delay, self._retry, (p,))
        timer.daemon = True
        timer.start()

    def _fail_partition(self, p: _Partition, exc: BaseException) -> tuple[int, list[tuple[_EventFuture, BaseException]]]:
        """End the partition for this sender (under the lock); the futures to fail outside it, for
        ``_complete_failed``."""
        p.failed = exc
        doomed: list[tuple[_EventFuture, BaseException]] = [
            (f, exc) for b in p.in_flight for f in b.futures]
        doomed += [(f, exc) for f in p.waiting]
        self._release(sum(b.size for b in p.in_flight)
                      + sum(len(e[1]) + (len(e[0]) if e[0] else 0) for e in p.pending))
        p.in_flight.clear()
        p.pending.clear()
        p.waiting.clear()
        p.retrying = False
        return self._settling_start([f for f, _ in doomed]), doomed

    def _retry(self, p: _Partition) -> None:
        if p.reroute:
            self._route_again(p)
            return
        if p.sealed_seen and self._stream_sealed():
            with self._lock:
                p.retry_scheduled = p.sealed_seen = False
                ended = self._fail_partition(p, StreamSealedError(
                    f"stream {self.scope}/{self.stream} is sealed: it takes no more events"))
            self._complete_failed(*ended)
            return
        p.sealed_seen = False
        # Find the owner and connect first, outside the lock: a container between owners, or a server
        # restarting, may take a while. A routed partition tries for a while at a time, so the owner is
        # looked up again (it may move once more) and the give-up below is checked between tries.
        reconnect_timeout = self.controller.pool.reconnect_timeout
        lost: ConnectionLostError | None = None
        with self._lock:
            segment, endpoint = p.segment, p.endpoint
        routed = segment is not None and self.controller.owners.cluster
        try:
            if segment is not None and endpoint is None:
                endpoint = self.controller.owners.owner(segment, min(ROUTED_PATIENCE, reconnect_timeout))
            self.controller.pool.get(endpoint or self.controller.endpoint,
                                     patience=min(ROUTED_PATIENCE, reconnect_timeout) if routed else None)
        except ConnectionLostError as exc:
            log.warning("%s: cannot reach partition %d's owner yet: %s", self._label, p.number, exc)
            lost = exc
            if segment is not None:
                self.controller.owners.forget(segment, endpoint)
            endpoint = None
        doomed: tuple[int, list[tuple[_EventFuture, BaseException]]] | None = None
        with self._lock:
            p.retrying = p.retry_scheduled = False
            if p.segment == segment:
                p.endpoint = endpoint
            if lost is not None and p.failing_since is not None \
                    and time.monotonic() - p.failing_since >= reconnect_timeout:
                # The server stayed away for the whole reconnect timeout: give up rather than retry
                # forever. Whether these batches landed is unknown; the partition takes no more events.
                doomed = self._fail_partition(p, ConnectionLostError(
                    f"{self._label}: no connection for {reconnect_timeout:g} s, giving up: {lost}"))
            elif lost is not None and routed:
                p.retrying = True  # no owner reached: look again (backing off) before resending
                self._schedule_retry(p)
            else:
                for batch in list(p.in_flight):
                    if p.retrying:
                        break  # this resend failed already: the next one sends from the first batch again
                    if batch.refused_retired:
                        continue  # stays for ``_drain``, in its place
                    self.resent_batches += 1
                    self._send(p, batch)
                self._drain(p)
                self._pump(p)
        if doomed is not None:
            self._complete_failed(*doomed)

    def _stream_sealed(self) -> bool:
        """Whether the stream is sealed now (blocking; outside the lock). Unknown counts as not."""
        try:
            described = self.controller.ask(m.DescribeStream(scope=self.scope, stream=self.stream),
                                            m.StreamDescriptionReply, retry=True)
        except Exception:  # noqa: BLE001 - the resend finds out again
            return False
        return described.state == "sealed"

    # -- a native stream's partition retired (a split inside its slice) -------------------------------
    def _route_again(self, p: _Partition) -> None:
        """Read the stream's routing again (outside the lock), take it, and send on (timer thread)."""
        try:
            routing = self.controller.ask(m.WriterRouting(scope=self.scope, stream=self.stream),
                                          m.WriterRoutingReply, retry=True)
        except Exception as exc:  # noqa: BLE001 - any failure ends the partition's events, named
            with self._lock:
                doomed = self._fail_partition(p, exc)
            self._complete_failed(*doomed)
            return
        with self._lock:
            p.retry_scheduled = p.reroute = False
            self._take_routing(list(routing.slices), set(routing.retired), list(routing.segments))
            if not p.retired:  # refused by a node that knew more than the routing read here: ask again
                p.reroute = p.retrying = True
                self._schedule_retry(p)
                return
            p.retrying = False
            for batch in list(p.in_flight):
                if not batch.refused_retired:  # its answer was lost: the resend finds out whether it landed
                    self.resent_batches += 1
                    self._send(p, batch)
            self._drain(p)

    def _take_routing(self, slices: list[tuple[float, float]], retired: set[int],
                      segments: list[str | None]) -> None:
        """Learn partitions added and retired since (under the lock). A partition's slice never changes,
        so the known ones stay as they are; each live partition inside a newly retired one's slice is held
        until the retired one's events are routed to it (``_drain``), which keeps order per key."""
        owners = self.controller.owners
        for number in range(len(self._partitions), len(slices)):
            q = _Partition(number)
            segment = segments[number] if number < len(segments) else None
            if segment is not None:
                q.segment = segment
                q.endpoint = owners.cached(segment)
            self._partitions.append(q)
        self.slices = slices
        newly = [self._partitions[r] for r in sorted(retired) if not self._partitions[r].retired]
        for r in newly:
            r.retired = True
        for r in newly:
            lo, hi = slices[r.number]
            for q in self._partitions:
                if not q.retired and lo <= slices[q.number][0] and slices[q.number][1] <= hi:
                    q.held.add(r.number)
        self._routed_keys.clear()
        self._unkeyed = itertools.cycle(self._live())
        self._routing_grew()
        for r in newly:
            self._drain(r)

    def _routing_grew(self) -> None:
        """Hook: the partitions changed (under the lock)."""

    def _drain(self, r: _Partition) -> None:
        """A retired partition's events, once none of its batches can still land there, queued ahead of
        anything newer on the partitions that hold their keys now, in order (under the lock)."""
        if not r.retired or any(not b.refused_retired for b in r.in_flight):
            return
        events = [e for b in r.in_flight for e in b.events] + list(r.pending)
        futures = [f for b in r.in_flight for f in b.futures] + list(r.waiting)
        r.in_flight.clear()
        r.pending.clear()
        r.waiting.clear()
        r.retrying = False
        moved: dict[int, tuple[list[_Event], list[_EventFuture]]] = {}
        target = -1
        for event, fut in zip(events, futures, strict=True):
            if event[3] != 0:  # the rest of a write_events group goes where its first went
                target = self._partition_of_event(event)
            to = moved.setdefault(target, ([], []))
            to[0].append(event)
            to[1].append(fut)
        for q in self._partitions:
            if r.number in q.held or q.number in moved:
                q.held.discard(r.number)
                if q.number in moved:
                    q.pending.extendleft(reversed(moved[q.number][0]))
                    q.waiting.extendleft(reversed(moved[q.number][1]))
                self._pump(q)


class EventStreamWriter(EventSender[T]):
    """Events with routing keys, in order per key, exactly once across reconnects and restarts.

    Every event has an event number, increasing per writer id: by default one more than the writer's
    previous event (a writer opened again under its id starts above every number the stream records
    for it), or the ``event_number`` the application gives, for example its source position. Each
    partition's segment records the writer id's last event number with the data (a segment attribute);
    a writer opened again under the same id learns those numbers and skips any event numbered at or
    below its partition's (its future gives ``ALREADY_WRITTEN``), so an application that restarts and
    writes its events again with the same numbers stores each exactly once. Events without a routing key
    go to a partition chosen by their event number, so they are found again too. Only a writer opened
    with an explicit ``writer_id`` records its numbers (one opened without gets a random id that nobody
    can open again, so its segments would keep numbers for nothing; its reconnects are exact anyway,
    through its producer sequences).
    """

    def __init__(self, controller: ControllerClient, scope: str, stream: str,
                 serializer: Serializer[T] | None = None, writer_id: str | None = None, *,
                 max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                 max_block_seconds: float = DEFAULT_MAX_BLOCK_SECONDS) -> None:
        self.writer_id = writer_id or uuid.uuid4().hex
        self._numbered = writer_id is not None
        opened = controller.ask(m.OpenWriter(scope=scope, stream=stream, writer_id=self.writer_id),
                                m.OpenWriterReply, retry=True)
        recorded = {int(p): n for p, n in opened.event_numbers.items()}
        self._recorded = recorded  # per partition, the id's last event number when the writer opened
        self._written_before: list[int] = []
        super().__init__(controller, scope, stream, serializer, opened.producer_id, opened.epoch,
                         list(opened.slices), f"writer {self.writer_id}", segments=list(opened.segments),
                         retired=opened.retired, max_buffered_bytes=max_buffered_bytes,
                         max_block_seconds=max_block_seconds)
        self._routing_grew()
        self._previous = -1  # the number of this instance's previous event
        # max(_previous, the highest number recorded at open): kept as one field, it is read per event
        self._highest = max(recorded.values(), default=-1)
        self._noter = watermarks.TimeNoter(controller, scope, stream, self.writer_id)  # note_time's marks

    def _routing_grew(self) -> None:
        """Per partition, the number at or below which an event is skipped as written before: the highest
        the stream held at open in the partition or in any retired one whose slice holds its slice (keys
        now routed here went there before; slices never change, so containment is exact)."""
        recorded, slices = self._recorded, self.slices
        retired = [(r.number, *slices[r.number]) for r in self._partitions if r.retired and r.number in recorded]
        self._written_before = [
            max([recorded.get(q, -1)] + [recorded[r] for r, lo, hi in retired
                                          if lo <= slices[q][0] and slices[q][1] <= hi])
            for q in range(len(slices))]

    @property
    def written_before(self) -> dict[int, int]:
        """Per partition, the last event number of this writer id the stream held when the writer opened
        (partitions it never wrote to are missing)."""
        return dict(self._recorded)

    @property
    def last_event_number(self) -> int:
        """The highest event number of this writer id so far: of this instance's events and of those the
        stream held when it opened (-1 if none); the next event is numbered one more by default."""
        return self._highest

    def write_event(self, event: T, routing_key: str | None = None, *,
                    event_number: int | None = None, block: bool = True) -> Future[EventPosition]:
        """Queue ``event``; the future completes with its position once it is durable (or fails).
        ``event_number`` must exceed this instance's previous one (a restarted writer may start again from
        its first event); by default it is ``last_event_number`` plus one. While the writer holds
        ``max_buffered_bytes`` unacknowledged this waits for room, up to ``max_block_seconds`` (not at all
        with ``block=False``), then raises WriterBufferFullError."""
        # The per-event path of every native write: kept to plain local operations (no property, no max).
        data = self.serializer.serialize(event)
        fut = _EventFuture()
        with self._lock:
            if self._closed:
                self._refuse_writes()
            if self._buffered + len(data) > self._max_buffered:
                self._admit(len(data) + (len(routing_key.encode()) if routing_key is not None else 0), block)
            if event_number is None:
                number = self._highest = self._highest + 1
            elif event_number > self._previous:
                number = event_number
                if number > self._highest:
                    self._highest = number
            else:
                raise ValueError(f"event number {event_number} does not exceed the previous one, {self._previous}")
            self._previous = number
            if routing_key is None:
                partition, key = self._partition_of_hash(number_hash(number)), None
            else:
                partition, key = self._routed_keys.get(routing_key) or self._route_key(routing_key)
            if number <= self._written_before[partition]:
                fut.complete(EventPosition(partition, ALREADY_WRITTEN))
                return fut
            self._enqueue(self._partitions[partition], key, data, fut, number if self._numbered else -1)
        return fut

    def write_events(self, routing_key: str, events: Iterable[T], *,
                     event_number: int | None = None, block: bool = True) -> Future[list[EventPosition]]:
        """Write ``events`` atomically under one routing key (Pravega's ``writeEvents``): they go in one
        batch, so readers and Kafka consumers see all of them, in order and together, or none. The
        future completes with their positions once they are durable, or fails for all of them.
        ``event_number`` numbers the first (the others follow it; by default ``last_event_number`` plus
        one): events written again under those numbers by a restarted writer id are skipped whole.
        ValueError for no events, more than ``MAX_ATOMIC_BYTES`` of them, or numbers that do not
        exceed the previous event's; waits for room in the buffer as ``write_event`` does."""
        datas = [self.serializer.serialize(event) for event in events]
        if not datas:
            raise ValueError("write_events needs at least one event")
        size = sum(len(d) for d in datas) + len(routing_key.encode()) * len(datas)
        if size > MAX_ATOMIC_BYTES:
            raise ValueError(f"write_events of {size} bytes: at most {MAX_ATOMIC_BYTES} go in one atomic batch")
        futures = [_EventFuture() for _ in datas]
        with self._lock:
            if self._closed:
                self._refuse_writes()
            self._admit(size, block)
            first = self._highest + 1 if event_number is None else event_number
            if first <= self._previous:
                raise ValueError(f"event number {first} does not exceed the previous one, {self._previous}")
            last = first + len(datas) - 1
            partition = self._partition_of_routing_key(routing_key)
            if first <= self._written_before[partition] < last:
                raise ValueError(f"event numbers {first}..{last}: the stream holds this writer's events up to "
                                 f"{self._written_before[partition]}, so only some of them would be written")
            self._previous = last
            self._highest = max(self._highest, last)
            if last <= self._written_before[partition]:
                for fut in futures:
                    fut.complete(EventPosition(partition, ALREADY_WRITTEN))
            else:
                self._enqueue_atomic(self._partitions[partition], routing_key, [
                    (data, fut, first + i if self._numbered else -1) for i, (data, fut) in
                    enumerate(zip(datas, futures, strict=True))])
        return _all_of(futures)

    def note_time(self, timestamp: int) -> None:
        """Note that every event this writer writes from now on carries a time at or after
        ``timestamp`` (any integer clock, e.g. epoch milliseconds; increasing per writer), as
        Pravega's ``noteTime``: readers' ``get_current_time_window`` is built from these marks. It
        flushes first (so it waits until what was written is durable) and then records the mark
        (``client/watermarks.py``)."""
        self.flush()
        self._noter.note(timestamp)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._noter.close()

    def __enter__(self) -> EventStreamWriter[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _all_of(futures: list[_EventFuture]) -> Future[list[EventPosition]]:
    """One future for events written together: their positions, or the first failure."""
    combined: Future[list[EventPosition]] = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[EventPosition]) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is not None:
            combined.set_exception(failed)
        else:
            combined.set_result([f.result() for f in futures])

    for fut in futures:
        fut.add_done_callback(one_done)
    return combined
