"""Key/value tables stored in segments (Pravega's table segments).

A table is one segment holding batches of entries (see ``encoding``); the segment is the source of
truth. Each table has an in-memory index key -> (version, where the value lies), built on first use
by reading the segment from its start offset and kept current by every write.

Versions are segment offsets: the offset of the entry's header when first written. They are unique
per table and grow with every update of a key. Compaction copies live entries to the tail carrying
their version explicitly, so a key's version never changes unless the key is updated: a client
holding a version for a conditional update is not disturbed by compaction.

Concurrency: every write is a conditional append at the length the index has read up to, so the
checks (expected versions) and the append are atomic even across several TableStore instances over
one store. Within one instance a per-table lock serializes writers; a writer that loses a race to
another instance gets BadOffsetError from the store, catches its index up from the segment and
re-checks. One TableStore per process is the expected deployment; more are correct, only slower
(each reads the others' writes back). All methods block: call them from worker threads, never
from the reactor.

Compaction runs inside the write that crosses the threshold, one bounded step at a time (read at
most ``compaction_max_prefix_bytes`` of prefix, append its live entries, truncate), so a write may
pay for one step; ``compact()`` runs it on demand.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from millrace.store.errors import (
    BadOffsetError,
    DataCorruptionError,
    OffsetOutOfRangeError,
    SegmentTruncatedError,
    StoreError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.store.tables.encoding import (
    BATCH_HEADER,
    ENTRY_HEADER,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    VERSION,
    DecodedEntry,
    EncodedEntry,
    batch_length,
    decode_batch,
    encode_batch,
)

if TYPE_CHECKING:
    from millrace.store.contracts import SegmentService

MiB = 1024 * 1024
# Segment attribute marking a segment as a table (value: the encoding format).
TABLE_ATTRIBUTE = "table.format"

T = TypeVar("T")


class _NotExists:
    """Sentinel type of ``NOT_EXISTS``."""

    _instance: _NotExists | None = None

    def __new__(cls) -> _NotExists:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_EXISTS"


NOT_EXISTS = _NotExists()
"""Expected version meaning "the key must be absent"."""

ExpectedVersion = int | None | _NotExists


class TableNotEmptyError(StoreError):
    """delete_table(must_be_empty=True) found live keys."""


class NotATableError(StoreError):
    """The named segment exists but is not a table segment."""


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class TableKey:
    key: bytes
    version: int


@dataclass(frozen=True)
class IteratorPage(Generic[T]):
    """One page of an iteration. ``continuation`` resumes after this page; None: nothing follows."""

    items: list[T]
    continuation: bytes | None


@dataclass(frozen=True)
class TableChanges:
    """What ``changes_since`` found: entries in the order written (a removal's value is None), the
    position to ask from next, whether that is the table's end, and whether the caller must start
    over (its position was compacted away)."""

    entries: list[DecodedEntry]
    next_position: int
    reached_end: bool
    cleared: bool


@dataclass(frozen=True)
class TableInfo:
    name: str
    key_count: int
    live_bytes: int  # bytes of the entries the index points at
    start_offset: int
    length: int


@dataclass(frozen=True)
class TableConfig:
    # Segments smaller than this are never compacted: rewriting them gains nothing.
    compaction_min_bytes: int = 4 * MiB
    # Compact once live bytes fall below this share of the segment's retained bytes.
    compaction_min_utilization: float = 0.5
    # One compaction step rewrites the live entries of at most this much segment prefix, so a
    # step is one bounded append (the store caps appends at 16 MiB).
    compaction_max_prefix_bytes: int = 4 * MiB
    # Read size when rebuilding an index from the segment.
    read_chunk_bytes: int = 1 * MiB
    # How long to wait for any one store operation.
    timeout: float = 60.0


class _Slot(NamedTuple):
    version: int
    offset: int  # entry header position in the segment
    value_offset: int
    value_length: int
    size: int  # whole entry, for the live-bytes account


class _Table:
    """Index and bookkeeping of one table; every field is guarded by ``lock``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.RLock()
        self.loaded = False
        self.created_ms = 0
        self.index: dict[bytes, _Slot] = {}
        self.start = 0
        self.length = 0  # everything below is applied to the index
        self.live_bytes = 0
        self.batches: deque[int] = deque()  # batch start offsets >= start: the only safe truncation points
        self._sorted: list[bytes] | None = None

    def reset(self, start: int, created_ms: int) -> None:
        self.index.clear()
        self.batches.clear()
        self.start = self.length = start
        self.live_bytes = 0
        self.created_ms = created_ms
        self._sorted = None
        self.loaded = True

    def apply(self, e: DecodedEntry) -> None:
        old = self.index.get(e.key)
        if old is not None:
            self.live_bytes -= old.size
        if e.value is None:
            if old is not None:
                del self.index[e.key]
                self._sorted = None
            return
        self.index[e.key] = _Slot(e.version, e.offset, e.value_offset, len(e.value), e.size)
        self.live_bytes += e.size
        if old is None:
            self._sorted = None

    def sorted_keys(self) -> list[bytes]:
        # Re-sorted only when the key set changes; value updates keep the cache.
        if self._sorted is None:
            self._sorted = sorted(self.index)
        return self._sorted


def _decoded(e: EncodedEntry, offset: int) -> DecodedEntry:
    """The index view of an entry we just wrote at ``offset``."""
    explicit = e.version is not None
    value_offset = offset + ENTRY_HEADER.size + (VERSION.size if explicit else 0) + len(e.key)
    version = e.version if e.version is not None else offset
    return DecodedEntry(offset, e.key, e.value, version, value_offset, e.size)


def _token(key: bytes) -> bytes:
    return b"\x01" + key


def continuation_after(key: bytes) -> bytes:
    """The continuation token that resumes an iteration just after ``key``."""
    return _token(key)


def _untoken(token: bytes) -> bytes:
    if not token or token[0] != 1:
        raise ValueError("not a table continuation token")
    return token[1:]


class TableStore:
    """Tables over a SegmentStore. Thread-safe; see the module docstring for the concurrency model."""

    def __init__(self, segment_store: SegmentService, config: TableConfig | None = None) -> None:
        self.store = segment_store
        self.config = config or TableConfig()
        self._lock = threading.Lock()
        self._tables: dict[str, _Table] = {}

    # -- tables ------------------------------------------------------------------------------------
    def create_table(self, name: str) -> None:
        """Create an empty table. SegmentExistsError if the name is taken."""
        self.store.create_segment(name, {TABLE_ATTRIBUTE: 1}).result(self.config.timeout)

    def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        """Delete the table's segment. TableNotEmptyError if asked to and a key is live."""
        t = self._table(name)
        with t.lock:
            if must_be_empty and t.index:
                raise TableNotEmptyError(f"table {name} has {len(t.index)} keys")
            try:
                self.store.delete(name).result(self.config.timeout)
            finally:
                with self._lock:
                    self._tables.pop(name, None)

    def exists(self, name: str) -> bool:
        return self.store.exists(name)

    def get_info(self, name: str) -> TableInfo:
        t = self._table(name)
        with t.lock:
            return TableInfo(name, len(t.index), t.live_bytes, t.start, t.length)

    # -- updates -----------------------------------------------------------------------------------
    def put(
        self, table: str, entries: Iterable[tuple[bytes, bytes] | tuple[bytes, bytes, ExpectedVersion]]
    ) -> list[int]:
        """Insert or update, all or nothing; returns the new versions in order.

        Each entry is (key, value) or (key, value, expected_version): None updates unconditionally,
        NOT_EXISTS requires the key to be absent, an int requires it to be the key's version
        (TableKeyVersionMismatchError; TableKeyNotFoundError when the key is absent)."""
        items: list[tuple[bytes, bytes, ExpectedVersion]] = []
        for item in entries:
            key, value = bytes(item[0]), bytes(item[1])
            expected = item[2] if len(item) > 2 else None
            if len(value) > MAX_VALUE_BYTES:
                raise ValueError(f"value of {len(value)} bytes exceeds {MAX_VALUE_BYTES}")
            items.append((key, value, expected))
        self._check_keys([k for k, _, _ in items])
        if not items:
            return []

        def build(t: _Table) -> list[EncodedEntry]:
            for key, _value, expected in items:
                self._check_version(t, key, expected)
            return [EncodedEntry(key, value) for key, value, _ in items]

        written = self._write(table, build)
        return [d.version for d in written]

    def remove(self, table: str, keys: Iterable[bytes | tuple[bytes, int | None]]) -> None:
        """Remove keys, all or nothing. A key given as (key, version) is removed only at that
        version (TableKeyVersionMismatchError; TableKeyNotFoundError when absent). Removing an
        absent key unconditionally is a no-op."""
        items: list[tuple[bytes, int | None]] = []
        for item in keys:
            if isinstance(item, tuple):
                key, expected = bytes(item[0]), item[1]
                if expected is not None and not isinstance(expected, int):
                    raise ValueError("a removal's expected version is an int or None")
            else:
                key, expected = bytes(item), None
            items.append((key, expected))
        self._check_keys([k for k, _ in items])

        def build(t: _Table) -> list[EncodedEntry]:
            for key, expected in items:
                self._check_version(t, key, expected)
            # Tombstones only for keys that exist: an absent key needs none.
            return [EncodedEntry(key, None) for key, _ in items if key in t.index]

        self._write(table, build)

    def update(self, table: str, items: Iterable[tuple[bytes, bytes | None, ExpectedVersion]]) -> list[int | None]:
        """Puts and removals in one batch, all or nothing (Pravega's ``update`` of mixed
        ``TableModification``s). Each item is (key, value, expected): a value of None removes the key.
        Expected versions work as in ``put`` and ``remove``; a removal cannot expect NOT_EXISTS.
        Returns, in order, each put's new version and None for each removal."""
        checked: list[tuple[bytes, bytes | None, ExpectedVersion]] = []
        for key, value, expected in items:
            if value is None:
                if expected is NOT_EXISTS:
                    raise ValueError("a removal cannot expect the key to be absent")
            elif len(value) > MAX_VALUE_BYTES:
                raise ValueError(f"value of {len(value)} bytes exceeds {MAX_VALUE_BYTES}")
            checked.append((bytes(key), None if value is None else bytes(value), expected))
        self._check_keys([k for k, _, _ in checked])
        if not checked:
            return []

        def build(t: _Table) -> list[EncodedEntry]:
            for key, _value, expected in checked:
                self._check_version(t, key, expected)
            # Tombstones only for keys that exist, as in ``remove``.
            return [EncodedEntry(key, value) for key, value, _ in checked if value is not None or key in t.index]

        # ``build`` keeps the items' order, so the puts' entries come back in their order.
        versions = iter([d.version for d in self._write(table, build) if d.value is not None])
        return [None if value is None else next(versions) for _key, value, _ in checked]

    # -- reads -------------------------------------------------------------------------------------
    def get(self, table: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        """Current entries of ``keys`` (None for absent keys), in order."""
        keys = [bytes(k) for k in keys]
        t = self._table(table)
        with t.lock:
            slots = [t.index.get(k) for k in keys]
        return self._materialize(t, keys, slots)

    def get_all(self, table: str, prefix: bytes = b"") -> dict[bytes, TableEntry]:
        """Every live entry (whose key starts with ``prefix``), by key."""
        return {e.key: e for e in self.entries(table, prefix)}

    def iterate_keys(
        self, table: str, continuation: bytes | None = None, limit: int = 1000, prefix: bytes = b"",
        start: bytes | None = None, end: bytes | None = None,
    ) -> IteratorPage[TableKey]:
        """Up to ``limit`` keys in ascending byte order, after ``continuation`` (from a previous
        page), of those that start with ``prefix`` and lie in [``start``, ``end``) when given. Order
        is by key, so a token stays valid across updates, compaction and restarts."""
        t, page, more = self._page(table, continuation, limit, prefix, start, end)
        items = [TableKey(k, s.version) for k, s in page]
        return IteratorPage(items, _token(page[-1][0]) if more and page else None)

    def iterate_entries(
        self, table: str, continuation: bytes | None = None, limit: int = 1000, prefix: bytes = b"",
        start: bytes | None = None, end: bytes | None = None,
    ) -> IteratorPage[TableEntry]:
        """Like iterate_keys, with values."""
        t, page, more = self._page(table, continuation, limit, prefix, start, end)
        entries = self._materialize(t, [k for k, _ in page], [s for _, s in page])
        items = [e for e in entries if e is not None]
        return IteratorPage(items, _token(page[-1][0]) if more and page else None)

    def keys(self, table: str, prefix: bytes = b"") -> Iterator[TableKey]:
        """Every key, page by page."""
        return _all_pages(lambda token: self.iterate_keys(table, token, prefix=prefix))

    def entries(self, table: str, prefix: bytes = b"") -> Iterator[TableEntry]:
        """Every entry, page by page."""
        return _all_pages(lambda token: self.iterate_entries(table, token, prefix=prefix))

    def changes_since(self, table: str, position: int, limit: int, max_bytes: int = MiB) -> TableChanges:
        """The entries written at or after segment ``position``, in the order written, whole batches at a
        time until ``limit`` entries or ``max_bytes`` (Pravega's delta iterator, which state synchronizers
        follow). A removal comes back as an entry with value None. A ``position`` that compaction
        truncated away starts over from the segment's start with ``cleared`` set: what the caller folded
        so far is stale, and the live entries (compaction copies them to the tail) follow."""
        if limit < 1:
            raise ValueError("limit must be positive")
        t = self._table(table)
        with t.lock:
            start, length = t.start, t.length
            batches = list(t.batches)
        cleared = position < start
        i = bisect.bisect_left(batches, max(position, start))
        entries: list[DecodedEntry] = []
        taken = 0
        next_position = batches[i] if i < len(batches) else length
        while i < len(batches) and len(entries) < limit and taken < max_bytes:
            offset = batches[i]
            end = batches[i + 1] if i + 1 < len(batches) else length
            try:
                data = self._read_exact(t.name, offset, end - offset)
            except SegmentTruncatedError:  # compacted meanwhile: the caller asks again from here
                break
            entries.extend(decode_batch(data, offset))
            taken += end - offset
            next_position = end
            i += 1
        return TableChanges(entries, next_position, next_position >= length, cleared)

    # -- compaction --------------------------------------------------------------------------------
    def compact(self, table: str) -> None:
        """Compact the whole segment as it stands now, regardless of the utilization threshold."""
        t = self._table(table)
        with t.lock:
            end = t.length
            while t.start < end:
                if not self._compact_step(t):
                    return

    def _maybe_compact(self, t: _Table) -> None:
        total = t.length - t.start
        cfg = self.config
        if total >= cfg.compaction_min_bytes and t.live_bytes < total * cfg.compaction_min_utilization:
            self._compact_step(t)

    def _compact_step(self, t: _Table) -> bool:
        """Copy the live entries of a bounded prefix to the tail, then truncate the prefix away.
        Returns False when another writer got in first (the caller may simply try later)."""
        # Truncation must land on a batch boundary. Take the first one whatever its size (progress),
        # then extend while the prefix stays within the bound.
        boundaries = itertools.chain((b for b in t.batches if b > t.start), (t.length,))
        cut = next(boundaries)
        for b in boundaries:
            if b - t.start > self.config.compaction_max_prefix_bytes:
                break
            cut = b
        moved = sorted(((k, s) for k, s in t.index.items() if s.offset < cut), key=lambda ks: ks[1].offset)
        if moved:
            data = self._read_exact(t.name, t.start, cut - t.start)
            copies = []
            for key, s in moved:
                pos = s.value_offset - t.start
                copies.append(EncodedEntry(key, data[pos : pos + s.value_length], s.version))
            if not self._append(t, copies):
                return False
        try:
            self.store.truncate(t.name, cut).result(self.config.timeout)
        except OffsetOutOfRangeError:
            # Another instance truncated further meanwhile; our next sync adopts its start.
            return False
        t.start = cut
        while t.batches and t.batches[0] < cut:
            t.batches.popleft()
        return True

    # -- internals ---------------------------------------------------------------------------------
    def _check_keys(self, keys: list[bytes]) -> None:
        for key in keys:
            if not key or len(key) > MAX_KEY_BYTES:
                raise ValueError(f"table keys are 1..{MAX_KEY_BYTES} bytes, got {len(key)}")
        if len(set(keys)) != len(keys):
            raise ValueError("a batch names the same key twice")

    @staticmethod
    def _check_version(t: _Table, key: bytes, expected: ExpectedVersion) -> None:
        if expected is None:
            return
        if expected is not NOT_EXISTS and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise ValueError(f"expected version {expected!r} is not an int, None or NOT_EXISTS")
        current = t.index.get(key)
        if expected is NOT_EXISTS:
            if current is not None:
                raise TableKeyVersionMismatchError(f"key {key!r} exists (version {current.version})")
        elif current is None:
            raise TableKeyNotFoundError(f"key {key!r} does not exist")
        elif current.version != expected:
            raise TableKeyVersionMismatchError(
                f"key {key!r} is at version {current.version}, expected {expected}"
            )

    def _write(self, table: str, build: Callable[[_Table], list[EncodedEntry]]) -> list[DecodedEntry]:
        """Check and append under the table lock; on losing a race to another writer of the
        segment, catch up and check again."""
        t = self._table(table)
        with t.lock:
            while True:
                encoded = build(t)
                if not encoded:
                    return []
                written = self._append(t, encoded)
                if written is not None:
                    self._maybe_compact(t)
                    return written
                self._sync(t)

    def _append(self, t: _Table, encoded: list[EncodedEntry]) -> list[DecodedEntry] | None:
        """Conditional append at the indexed length; None when the segment has moved on."""
        data, positions = encode_batch(encoded)
        try:
            base = self.store.append(t.name, data, expected_offset=t.length).result(self.config.timeout)
        except BadOffsetError as e:
            if e.actual > t.length:
                # Another writer's append is accepted but maybe not durable yet, so not readable:
                # wait for the tail to move instead of spinning on get_info.
                with contextlib.suppress(OffsetOutOfRangeError):  # truncated meanwhile: _sync copes
                    self.store.read(t.name, t.length, 1, wait_timeout=0.5).result(self.config.timeout)
            return None
        written = [_decoded(e, base + p) for e, p in zip(encoded, positions, strict=True)]
        for d in written:
            t.apply(d)
        t.batches.append(base)
        t.length = base + len(data)
        return written

    def _table(self, name: str) -> _Table:
        with self._lock:
            t = self._tables.get(name)
            if t is None:
                t = self._tables[name] = _Table(name)
        with t.lock:
            self._sync(t)
        return t

    def _sync(self, t: _Table) -> None:
        """Bring the index up to the segment's current length (rebuilding it when needed)."""
        info = self.store.get_info(t.name)
        if not t.loaded or info.created_ms != t.created_ms or info.length < t.length:
            if info.attributes.get(TABLE_ATTRIBUTE) is None:
                raise NotATableError(f"segment {t.name} is not a table")
            t.reset(info.start_offset, info.created_ms)
        elif info.start_offset > t.start:
            # Another instance compacted; its copies are past our length and arrive below.
            t.start = info.start_offset
            while t.batches and t.batches[0] < t.start:
                t.batches.popleft()
        if info.length > t.length:
            self._scan(t, t.length, info.length)

    def _scan(self, t: _Table, start: int, end: int) -> None:
        buf = b""
        buf_offset = start  # segment offset of buf[0]
        read_pos = start
        while True:
            pos = 0
            while len(buf) - pos >= BATCH_HEADER.size:
                total = batch_length(buf[pos : pos + BATCH_HEADER.size], buf_offset + pos)
                if len(buf) - pos < total:
                    break
                for entry in decode_batch(buf[pos : pos + total], buf_offset + pos):
                    t.apply(entry)
                t.batches.append(buf_offset + pos)
                pos += total
            buf = buf[pos:]
            buf_offset += pos
            if read_pos >= end:
                break
            chunk = self._read_some(t.name, read_pos, min(self.config.read_chunk_bytes, end - read_pos))
            buf += chunk
            read_pos += len(chunk)
        if buf:
            raise DataCorruptionError(f"table {t.name} ends in a partial batch at offset {buf_offset}")
        t.length = end

    def _read_some(self, name: str, offset: int, length: int) -> bytes:
        result = self.store.read(name, offset, length).result(self.config.timeout)
        if not result.data:
            raise DataCorruptionError(f"segment {name} returned no data at offset {offset} below its length")
        return result.data

    def _read_exact(self, name: str, offset: int, length: int) -> bytes:
        parts = []
        while length > 0:
            data = self._read_some(name, offset, length)
            parts.append(data)
            offset += len(data)
            length -= len(data)
        return b"".join(parts)

    def _materialize(
        self, t: _Table, keys: list[bytes], slots: list[_Slot | None]
    ) -> list[TableEntry | None]:
        """Read the values the slots point at. Compaction may truncate them away meanwhile; then
        look the keys up again (their copies sit at the tail)."""
        while True:
            try:
                return [
                    None
                    if s is None
                    else TableEntry(k, self._read_exact(t.name, s.value_offset, s.value_length), s.version)
                    for k, s in zip(keys, slots, strict=True)
                ]
            except SegmentTruncatedError:
                with t.lock:
                    self._sync(t)
                    slots = [t.index.get(k) for k in keys]

    def _page(
        self, table: str, continuation: bytes | None, limit: int, prefix: bytes,
        start: bytes | None = None, end: bytes | None = None,
    ) -> tuple[_Table, list[tuple[bytes, _Slot]], bool]:
        if limit < 1:
            raise ValueError("limit must be positive")
        t = self._table(table)

        def within(key: bytes) -> bool:
            return key.startswith(prefix) and (end is None or key < end)

        with t.lock:
            ordered = t.sorted_keys()
            i = bisect.bisect_left(ordered, prefix if start is None else max(prefix, start))
            if continuation is not None:
                i = max(i, bisect.bisect_right(ordered, _untoken(continuation)))
            page: list[tuple[bytes, _Slot]] = []
            while i < len(ordered) and len(page) < limit:
                key = ordered[i]
                if not within(key):
                    return t, page, False
                page.append((key, t.index[key]))
                i += 1
            more = i < len(ordered) and within(ordered[i])
        return t, page, more


def is_conditional_failure(error: BaseException) -> bool:
    """True for the errors a failed conditional update raises."""
    return isinstance(error, TableKeyNotFoundError | TableKeyVersionMismatchError)


def _all_pages(fetch: Callable[[bytes | None], IteratorPage]) -> Iterator:
    """Items of every page, following continuation tokens until the last page."""
    token: bytes | None = None
    while True:
        page = fetch(token)
        yield from page.items
        if page.continuation is None:
            return
        token = page.continuation
