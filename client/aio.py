"""``millrace.aio``: the native client for asyncio, beside the blocking one (as aiokafka beside kafka-python).

    async with AsyncStreamManager("tcp://127.0.0.1:9090") as sm:
        await sm.create_scope("iot")
        await sm.create_stream("iot", "readings")
        async with await sm.create_writer("iot", "readings") as writer:
            await writer.write_event(b"21.5", routing_key="sensor-7")

Every object here wraps one of the blocking client (``.blocking`` reaches it) and never blocks the event
loop. Two ways, chosen per call:

- **Bridged futures** (no thread): writing an event. The blocking writer's ``write_event`` only queues
  the event and hands at most ``MAX_IN_FLIGHT`` batches per partition to a connected socket (it never
  connects, looks anything up or waits for an answer: a lost connection is retried on a timer thread),
  so it runs on the loop, and the ``concurrent.futures.Future`` it returns is bridged to an asyncio
  future (as ``asyncio.wrap_future`` does, but waking the loop once per burst of completions rather than
  once per event: ``_Completions``). ``send`` returns at once a ``PendingWrite``, bridged only when
  awaited, so a coroutine can have thousands of events in flight (aiokafka's ``send``) at the blocking
  writer's speed; ``write_event`` awaits it (``send_and_wait``).
  A reader's read, running on its own thread, is awaited through ``asyncio.wrap_future``.
- **A bounded executor**: every call that waits for the server (controller commands, opening writers,
  readers and groups, ``flush``, transactions' commit and abort, key-value operations, checkpoints) runs
  on the manager's thread pool of ``max_workers`` threads, so at most that many wait at once and the
  rest queue. Each reader long-polls on a thread of its own (``read_next_event(timeout)`` may wait its
  whole timeout), so readers never starve the pool and the pool never delays a read.

A reader group's notifiers (``segment_notifier``, ``end_of_data_notifier``) poll on a thread of their own,
as the blocking ones do, and hand each notification to the loop (``call_soon_threadsafe``): listeners run
on the loop, a coroutine listener as a task.

A read cancelled while its thread is already waiting is not lost: its event is what the reader's next
``read_next_event`` returns. One reader serves one coroutine at a time (concurrent reads of one reader
take turns), as Pravega's readers are single-threaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, ParamSpec, TypeVar

from millrace.client.kvtable import ITERATE_PAGE, Key, KeyValueTable, TableEntry, TableModification
from millrace.client.manager import StreamManager
from millrace.client.notifications import DEFAULT_INTERVAL_S as DEFAULT_NOTIFY_INTERVAL_S
from millrace.client.notifications import EndOfDataNotifier, SegmentNotifier
from millrace.client.reader_group import Checkpoint, EventRead, EventStreamReader, Position, ReaderGroup
from millrace.client.serializers import Serializer
from millrace.client.streams import StreamConfiguration, StreamCut, StreamDescription
from millrace.client.transactions import Transaction, TransactionalEventStreamWriter, TxnStatus
from millrace.client.writer import EventPosition, EventSender, EventStreamWriter, WriterBufferFullError

__all__ = [
    "AsyncEventReader",
    "AsyncEventWriter",
    "AsyncKeyValueTable",
    "AsyncReaderGroup",
    "AsyncStreamManager",
    "AsyncTransaction",
    "AsyncTransactionalWriter",
    "PendingWrite",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_WORKERS = 8
DEFAULT_POLL_SECONDS = 1.0  # how long ``async for`` waits per read before waiting again

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


class _Pool:
    """The bounded executor every blocking call of one manager goes through."""

    def __init__(self, max_workers: int) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers is at least 1, not {max_workers}")
        self.executor = ThreadPoolExecutor(max_workers, thread_name_prefix="millrace-aio")

    async def run(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))


class AsyncStreamManager:
    """``StreamManager`` for asyncio: ``async with AsyncStreamManager(uri, ...)``. Arguments after the URI
    are ``StreamManager``'s (timeouts, credentials, TLS); ``max_workers`` bounds the threads that run its
    blocking calls."""

    def __init__(self, controller_uri: str, *, max_workers: int = DEFAULT_MAX_WORKERS, **options: Any) -> None:
        self._uri = controller_uri
        self._options = options
        self._pool = _Pool(max_workers)
        self._manager: StreamManager | None = None

    async def start(self) -> AsyncStreamManager:
        """Connect (``async with`` does it); ConnectionLostError when nothing listens."""
        if self._manager is None:
            self._manager = await self._pool.run(StreamManager, self._uri, **self._options)
        return self

    async def close(self) -> None:
        """Close the connections, then the pool (calls still running finish first)."""
        if self._manager is not None:
            manager, self._manager = self._manager, None
            await self._pool.run(manager.close)
        self._pool.executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncStreamManager:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def blocking(self) -> StreamManager:
        """The blocking ``StreamManager`` underneath, for what this API does not wrap (its calls block:
        run them with ``run``)."""
        if self._manager is None:
            raise RuntimeError("the AsyncStreamManager is not started: use 'async with' or 'await start()'")
        return self._manager

    async def run(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Any blocking call of the client, run on this manager's bounded executor."""
        return await self._pool.run(fn, *args, **kwargs)

    # -- scopes and streams -------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> bool:
        return await self.run(self.blocking.create_scope, scope)

    async def check_scope_exists(self, scope: str) -> bool:
        return await self.run(self.blocking.check_scope_exists, scope)

    async def delete_scope(self, scope: str) -> None:
        await self.run(self.blocking.delete_scope, scope)

    async def list_scopes(self) -> list[str]:
        return await self.run(self.blocking.list_scopes)

    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None,
                            **overrides: Any) -> bool:
        """``StreamManager.create_stream``: False if it already existed."""
        return await self.run(self.blocking.create_stream, scope, stream, config, **overrides)

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        await self.run(self.blocking.update_stream, scope, stream, config)

    async def describe_stream(self, scope: str, stream: str) -> StreamDescription:
        return await self.run(self.blocking.describe_stream, scope, stream)

    async def check_stream_exists(self, scope: str, stream: str) -> bool:
        return await self.run(self.blocking.check_stream_exists, scope, stream)

    async def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        return await self.run(self.blocking.list_streams, scope, tag)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self.run(self.blocking.seal_stream, scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self.run(self.blocking.delete_stream, scope, stream)

    async def truncate_stream(self, cut: StreamCut) -> None:
        await self.run(self.blocking.truncate_stream, cut)

    async def head_cut(self, scope: str, stream: str) -> StreamCut:
        return await self.run(self.blocking.head_cut, scope, stream)

    async def tail_cut(self, scope: str, stream: str) -> StreamCut:
        return await self.run(self.blocking.tail_cut, scope, stream)

    # -- writers ------------------------------------------------------------------------------------
    async def create_writer(self, scope: str, stream: str, serializer: Serializer[T] | None = None,
                            writer_id: str | None = None, **options: Any) -> AsyncEventWriter[T]:
        """``StreamManager.create_writer`` for asyncio (``max_buffered_bytes``, ``max_block_seconds`` among
        ``options``): a full buffer is waited out off the loop."""
        writer: EventStreamWriter[T] = await self.run(functools.partial(
            self.blocking.create_writer, scope, stream, serializer, writer_id, **options))
        return AsyncEventWriter(writer, self._pool)

    async def create_transaction_writer(self, scope: str, stream: str, writer_id: str | None = None,
                                        serializer: Serializer[T] | None = None,
                                        **options: Any) -> AsyncTransactionalWriter[T]:
        """``StreamManager.create_transaction_writer`` for asyncio (``lease_ms`` among ``options``)."""
        writer: TransactionalEventStreamWriter[T] = await self.run(functools.partial(
            self.blocking.create_transaction_writer, scope, stream, writer_id, serializer, **options))
        return AsyncTransactionalWriter(writer, self._pool)

    # -- reader groups ------------------------------------------------------------------------------
    async def create_reader_group(self, name: str, scope: str, streams: str | list[str],
                                  start: StreamCut | list[StreamCut] | None = None,
                                  serializer: Serializer[T] | None = None, **options: Any) -> AsyncReaderGroup[T]:
        """``StreamManager.create_reader_group`` for asyncio (``end=`` and the other options pass through)."""
        group: ReaderGroup[T] = await self.run(functools.partial(
            self.blocking.create_reader_group, name, scope, streams, start, serializer, **options))
        return AsyncReaderGroup(group, self._pool)

    async def reader_group(self, name: str, scope: str, serializer: Serializer[T] | None = None) -> AsyncReaderGroup[T]:
        group: ReaderGroup[T] = await self.run(self.blocking.reader_group, name, scope, serializer)
        return AsyncReaderGroup(group, self._pool)

    async def delete_reader_group(self, name: str, scope: str) -> None:
        await self.run(self.blocking.delete_reader_group, name, scope)

    async def list_reader_groups(self, scope: str) -> list[str]:
        return await self.run(self.blocking.list_reader_groups, scope)

    # -- key-value tables ---------------------------------------------------------------------------
    async def create_key_value_table(self, scope: str, table: str, partitions: int = 1) -> AsyncKeyValueTable:
        kv = await self.run(self.blocking.create_key_value_table, scope, table, partitions)
        return AsyncKeyValueTable(kv, self._pool)

    async def key_value_table(self, scope: str, table: str) -> AsyncKeyValueTable:
        return AsyncKeyValueTable(await self.run(self.blocking.key_value_table, scope, table), self._pool)

    async def delete_key_value_table(self, scope: str, table: str) -> None:
        await self.run(self.blocking.delete_key_value_table, scope, table)

    async def list_key_value_tables(self, scope: str) -> list[str]:
        return await self.run(self.blocking.list_key_value_tables, scope)


class _Completions:
    """Bridges the futures of events into one loop, many per wake-up. ``asyncio.wrap_future`` wakes the
    loop once per future (a write to its self-pipe each); a batch of events completes together on the
    connection's thread, so this queues the completions and wakes the loop once for all that arrive
    before it runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._arrived: list[tuple[asyncio.Future[Any], Future[Any]]] = []

    def bridge(self, source: Future[R]) -> asyncio.Future[R]:
        target: asyncio.Future[R] = self._loop.create_future()
        # No ``source.done()`` first: on a pending event future it makes the threading.Condition the
        # writer avoids making per event (it cost 7x the throughput). A finished one calls back at once.
        source.add_done_callback(functools.partial(self._complete, target))
        return target

    def _complete(self, target: asyncio.Future[Any], source: Future[Any]) -> None:
        with self._lock:
            self._arrived.append((target, source))
            if len(self._arrived) > 1:
                return  # a wake-up is on its way and takes this one too
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits any more
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            arrived, self._arrived = self._arrived, []
        for target, source in arrived:
            _copy(source, target)


def _copy(source: Future[R], target: asyncio.Future[R]) -> None:
    if target.cancelled():
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class PendingWrite(Generic[R]):
    """What ``send`` returns: an awaitable of the event's position (``await``, ``asyncio.gather``,
    ``asyncio.wait_for`` take it), bridged to the loop only once something awaits it, so events sent and
    never awaited one by one (a ``flush`` covers them) cost the loop nothing more than the blocking
    writer's own work."""

    __slots__ = ("_source", "_completions")

    def __init__(self, source: Future[R], completions: _Completions) -> None:
        self._source = source
        self._completions = completions

    def __await__(self) -> Generator[Any, None, R]:
        return self._completions.bridge(self._source).__await__()

    def done(self) -> bool:
        """Whether the write finished (durable, or failed)."""
        return self._source.done()

    def result(self) -> R:
        """The position of a finished write (its error, if it failed); InvalidStateError before."""
        if not self._source.done():
            raise asyncio.InvalidStateError("the write has not finished")
        return self._source.result()

    def exception(self) -> BaseException | None:
        """The error of a finished write (None if it succeeded); InvalidStateError before."""
        if not self._source.done():
            raise asyncio.InvalidStateError("the write has not finished")
        return self._source.exception()


class _AsyncSender(Generic[T]):
    """Writing events through a blocking sender (a writer or a transaction): bridged futures."""

    def __init__(self, sender: EventSender[T], pool: _Pool) -> None:
        self._sender = sender
        self._pool = pool
        self._completions: _Completions | None = None

    async def _queue(self, write: Callable[..., R], *args: Any, **options: Any) -> R:
        """``write(*args, block=False, **options)`` on the loop; while the sender's buffer is full, its room
        is awaited on the pool (the loop never waits in the sender), up to its ``max_block_seconds``."""
        deadline = time.monotonic() + self._sender.max_block_seconds
        while True:
            try:
                return write(*args, block=False, **options)
            except WriterBufferFullError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                await self._pool.run(self._sender.wait_for_room, remaining)

    def _loop_completions(self) -> _Completions:
        if self._completions is None:
            self._completions = _Completions(asyncio.get_running_loop())
        return self._completions

    def _bridge(self, source: Future[R]) -> asyncio.Future[R]:
        return self._loop_completions().bridge(source)

    async def send(self, event: T, routing_key: str | None = None, **options: Any) -> PendingWrite[EventPosition]:
        """Queue ``event`` and return at once an awaitable of its position, complete once it is durable
        (aiokafka's ``send``): many may be in flight. Refusals raise here or from the awaitable."""
        return PendingWrite(await self._queue(self._sender.write_event, event, routing_key, **options),
                            self._loop_completions())

    async def write_event(self, event: T, routing_key: str | None = None, **options: Any) -> EventPosition:
        """Write ``event`` and wait until it is durable (aiokafka's ``send_and_wait``)."""
        return await self._bridge(await self._queue(self._sender.write_event, event, routing_key, **options))


class AsyncEventWriter(_AsyncSender[T]):
    """``EventStreamWriter`` for asyncio; ``async with`` flushes and closes it."""

    def __init__(self, writer: EventStreamWriter[T], pool: _Pool) -> None:
        super().__init__(writer, pool)
        self.blocking = writer

    async def write_events(self, routing_key: str, events: Iterable[T], *,
                           event_number: int | None = None) -> list[EventPosition]:
        """``EventStreamWriter.write_events``: atomically, under one routing key; waits until durable."""
        return await self._bridge(await self._queue(self.blocking.write_events, routing_key, list(events),
                                                    event_number=event_number))

    async def flush(self) -> None:
        """Wait until every event written so far is durable; raise the first failure among them."""
        await self._pool.run(self.blocking.flush)

    async def close(self) -> None:
        """Flush, then refuse further events."""
        await self._pool.run(self.blocking.close)

    @property
    def writer_id(self) -> str:
        return self.blocking.writer_id

    async def __aenter__(self) -> AsyncEventWriter[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncTransaction(_AsyncSender[T]):
    """``Transaction`` for asyncio: ``send`` / ``write_event``, then ``commit()`` or ``abort()``. ``async
    with`` commits when the block ends normally and aborts when it raises."""

    def __init__(self, txn: Transaction[T], pool: _Pool) -> None:
        super().__init__(txn, pool)
        self.blocking = txn

    @property
    def txn_id(self) -> uuid.UUID:
        return self.blocking.txn_id

    async def flush(self) -> None:
        await self._pool.run(self.blocking.flush)

    async def commit(self) -> None:
        """Flush, then commit; returns once every event is visible."""
        await self._pool.run(self.blocking.commit)

    async def abort(self) -> None:
        await self._pool.run(self.blocking.abort)

    async def check_status(self) -> TxnStatus:
        return await self._pool.run(self.blocking.check_status)

    async def ping(self) -> None:
        await self._pool.run(self.blocking.ping)

    async def __aenter__(self) -> AsyncTransaction[T]:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            await self.commit()
        else:
            await self.abort()


class AsyncTransactionalWriter(Generic[T]):
    """``TransactionalEventStreamWriter`` for asyncio."""

    def __init__(self, writer: TransactionalEventStreamWriter[T], pool: _Pool) -> None:
        self.blocking = writer
        self._pool = pool

    async def begin_txn(self) -> AsyncTransaction[T]:
        return AsyncTransaction(await self._pool.run(self.blocking.begin_txn), self._pool)

    async def get_txn(self, txn_id: uuid.UUID | str) -> AsyncTransaction[T]:
        return AsyncTransaction(await self._pool.run(self.blocking.get_txn, txn_id), self._pool)

    async def txn_status(self, txn_id: uuid.UUID | str) -> TxnStatus:
        return await self._pool.run(self.blocking.txn_status, txn_id)

    async def close(self) -> None:
        await self._pool.run(self.blocking.close)

    async def __aenter__(self) -> AsyncTransactionalWriter[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncReaderGroup(Generic[T]):
    """``ReaderGroup`` for asyncio."""

    def __init__(self, group: ReaderGroup[T], pool: _Pool) -> None:
        self.blocking = group
        self._pool = pool

    @property
    def name(self) -> str:
        return self.blocking.name

    async def create_reader(self, reader_id: str, serializer: Serializer[T] | None = None,
                            poll_seconds: float = DEFAULT_POLL_SECONDS) -> AsyncEventReader[T]:
        """A reader joining the group; ``poll_seconds``: how long each wait of ``async for`` lasts."""
        reader: EventStreamReader[T] = await self._pool.run(self.blocking.create_reader, reader_id, serializer)
        return AsyncEventReader(reader, poll_seconds)

    async def reader_offline(self, reader_id: str, last_position: Position | None) -> None:
        await self._pool.run(self.blocking.reader_offline, reader_id, last_position)

    async def online_readers(self) -> list[str]:
        return await self._pool.run(self.blocking.online_readers)

    async def initiate_checkpoint(self, name: str, timeout: float = 30.0) -> Checkpoint:
        """Waits (on the pool) until every reader passed the checkpoint: keep the readers reading."""
        return await self._pool.run(self.blocking.initiate_checkpoint, name, timeout)

    async def generate_stream_cuts(self, timeout: float = 30.0) -> dict[str, StreamCut]:
        return await self._pool.run(self.blocking.generate_stream_cuts, timeout)

    async def get_stream_cuts(self) -> dict[str, StreamCut]:
        return await self._pool.run(self.blocking.get_stream_cuts)

    async def reset_to(self, cuts: Checkpoint | StreamCut | Iterable[StreamCut] | Mapping[str, StreamCut]) -> None:
        await self._pool.run(self.blocking.reset_to, cuts)

    async def unread_bytes(self) -> int:
        return await self._pool.run(self.blocking.unread_bytes)

    def segment_notifier(self, *, interval: float | None = DEFAULT_NOTIFY_INTERVAL_S) -> SegmentNotifier:
        """``ReaderGroup.segment_notifier`` whose listeners run on this event loop: plain functions
        are called there, coroutine functions' coroutines run there as tasks. Call it from the loop."""
        return self.blocking.segment_notifier(_LoopSubmitter(asyncio.get_running_loop()), interval=interval)

    def end_of_data_notifier(self, *, interval: float | None = DEFAULT_NOTIFY_INTERVAL_S) -> EndOfDataNotifier:
        """``ReaderGroup.end_of_data_notifier`` whose listeners run on this event loop (as
        ``segment_notifier``'s)."""
        return self.blocking.end_of_data_notifier(_LoopSubmitter(asyncio.get_running_loop()), interval=interval)

    async def close(self) -> None:
        await self._pool.run(self.blocking.close)

    async def __aenter__(self) -> AsyncReaderGroup[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _LoopSubmitter:
    """Runs a notifier's listener calls on an event loop, from the notifier's polling thread: a
    coroutine a listener returns becomes a task of the loop (whose failure is logged, as a plain
    listener's is)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()  # running ones, so none is collected midway

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> None:
        self.loop.call_soon_threadsafe(self._run, fn, args)

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        result = fn(*args)
        if asyncio.iscoroutine(result):
            task = self.loop.create_task(result)
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a notification listener failed", exc_info=task.exception())


class AsyncEventReader(Generic[T]):
    """``EventStreamReader`` for asyncio: ``await read_next_event(timeout)``, or ``async for read in
    reader`` (every ``EventRead``, checkpoints included, until a bounded read completes)."""

    def __init__(self, reader: EventStreamReader[T], poll_seconds: float = DEFAULT_POLL_SECONDS) -> None:
        self.blocking = reader
        self.poll_seconds = poll_seconds
        # A thread of its own: a long poll must not hold one of the manager's pool's threads.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"millrace-aio-reader-{reader.reader_id}")
        self._turn = asyncio.Lock()
        self._pending: Future[EventRead[T] | None] | None = None  # a read whose caller was cancelled
        self._closed = False

    async def read_next_event(self, timeout: float = 0.0) -> EventRead[T] | None:
        """The next event (or checkpoint), waiting up to ``timeout`` seconds; None if none came."""
        async with self._turn:
            if self._closed:
                raise RuntimeError("the reader is closed")
            read = self._pending
            if read is None or read.cancelled() or (read.done() and read.exception() is None and read.result() is None):
                # Nothing left over (a cancelled read that found nothing leaves nothing to hand on).
                read = self._pending = self._thread.submit(self.blocking.read_next_event, timeout)
            # If the await is cancelled, a read not yet started is cancelled with it; one already
            # running stays in _pending, and the next call returns what it read.
            try:
                got = await asyncio.wrap_future(read)
            except asyncio.CancelledError:
                raise
            except BaseException:
                self._pending = None  # the read's error is raised once
                raise
            self._pending = None
            return got

    def __aiter__(self) -> AsyncIterator[EventRead[T]]:
        return self._reads()

    async def _reads(self) -> AsyncIterator[EventRead[T]]:
        while True:
            got = await self.read_next_event(self.poll_seconds)
            if got is None:
                continue
            if got.is_read_completed:
                return
            yield got

    @property
    def reader_id(self) -> str:
        return self.blocking.reader_id

    async def close(self) -> None:
        """Leave the group (after a read still running ends: at most its timeout)."""
        async with self._turn:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, None
            if pending is not None and not pending.cancelled():
                await asyncio.wrap_future(pending)
            await asyncio.get_running_loop().run_in_executor(self._thread, self.blocking.close)
        self._thread.shutdown(wait=False)

    async def __aenter__(self) -> AsyncEventReader[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncKeyValueTable:
    """``KeyValueTable`` for asyncio: each call runs on the manager's pool; iteration fetches a page per
    hop to the pool, so ``async for`` costs a thread switch per page, not per entry."""

    def __init__(self, table: KeyValueTable, pool: _Pool) -> None:
        self.blocking = table
        self._pool = pool

    async def put(self, key: Key, value: bytes, *, if_version: int | None = None,
                  key_family: Key | None = None) -> int:
        return await self._pool.run(self.blocking.put, key, value, if_version=if_version, key_family=key_family)

    async def put_if_absent(self, key: Key, value: bytes, *, key_family: Key | None = None) -> int:
        return await self._pool.run(self.blocking.put_if_absent, key, value, key_family=key_family)

    async def put_all(self, entries: Sequence[tuple[Key, bytes] | tuple[Key, bytes, int | None]], *,
                      key_family: Key | None = None) -> list[int]:
        return await self._pool.run(self.blocking.put_all, entries, key_family=key_family)

    async def get(self, key: Key, *, key_family: Key | None = None) -> tuple[bytes, int] | None:
        return await self._pool.run(self.blocking.get, key, key_family=key_family)

    async def get_all(self, keys: Iterable[Key], *, key_family: Key | None = None) -> list[tuple[bytes, int] | None]:
        return await self._pool.run(self.blocking.get_all, list(keys), key_family=key_family)

    async def remove(self, key: Key, *, if_version: int | None = None, key_family: Key | None = None) -> None:
        """Remove ``key`` (``KeyValueTable.delete``)."""
        await self._pool.run(self.blocking.delete, key, if_version=if_version, key_family=key_family)

    delete = remove

    async def remove_all(self, keys: Sequence[Key | tuple[Key, int | None]], *,
                         key_family: Key | None = None) -> None:
        await self._pool.run(self.blocking.remove_all, keys, key_family=key_family)

    async def update(self, modifications: Sequence[TableModification], *,
                     key_family: Key | None = None) -> list[int | None]:
        """Puts, inserts and removals of one family, all or none (``KeyValueTable.update``)."""
        return await self._pool.run(self.blocking.update, modifications, key_family=key_family)

    async def entries(self, **bounds: Any) -> AsyncIterator[TableEntry]:
        """``KeyValueTable.entries`` (same keyword arguments) as an async iterator."""
        async for entry in self._pages(self.blocking.entries(**bounds)):
            yield entry

    async def keys(self, **bounds: Any) -> AsyncIterator[tuple[Key, int]]:
        """``KeyValueTable.keys`` (same keyword arguments) as an async iterator."""
        async for key in self._pages(self.blocking.keys(**bounds)):
            yield key

    async def _pages(self, items: Iterator[R]) -> AsyncIterator[R]:
        while True:
            page = await self._pool.run(lambda: list(itertools.islice(items, ITERATE_PAGE)))
            for item in page:
                yield item
            if len(page) < ITERATE_PAGE:
                return
