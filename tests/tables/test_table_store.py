from __future__ import annotations

import threading

import pytest

from millrace.store.errors import (
    DataCorruptionError,
    SegmentExistsError,
    SegmentNotFoundError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.store.tables import NOT_EXISTS, TableConfig, TableNotEmptyError, TableStore
from millrace.store.tables.encoding import EncodedEntry, decode_batch, encode_batch
from tests.tables.harness import StoreHarness

T = "scope/_tables/t1"


@pytest.fixture
def table(tables: TableStore) -> str:
    tables.create_table(T)
    return T


def value_of(tables: TableStore, key: bytes) -> bytes | None:
    (entry,) = tables.get(T, [key])
    return None if entry is None else entry.value


def test_put_get_versions_are_offsets_and_grow(tables: TableStore, table: str) -> None:
    v1, v2 = tables.put(table, [(b"a", b"1"), (b"b", b"2")])
    assert v1 < v2
    a, b, missing = tables.get(table, [b"a", b"b", b"zz"])
    assert (a.key, a.value, a.version) == (b"a", b"1", v1)
    assert (b.value, b.version) == (b"2", v2)
    assert missing is None
    (v3,) = tables.put(table, [(b"a", b"one")])
    assert v3 > v2
    assert tables.get(table, [b"a"])[0].version == v3
    assert value_of(tables, b"a") == b"one"


def test_conditional_put(tables: TableStore, table: str) -> None:
    (v,) = tables.put(table, [(b"k", b"x", NOT_EXISTS)])
    with pytest.raises(TableKeyVersionMismatchError):
        tables.put(table, [(b"k", b"y", NOT_EXISTS)])
    with pytest.raises(TableKeyVersionMismatchError):
        tables.put(table, [(b"k", b"y", v + 1)])
    with pytest.raises(TableKeyNotFoundError):
        tables.put(table, [(b"absent", b"y", v)])
    (v2,) = tables.put(table, [(b"k", b"y", v)])
    assert value_of(tables, b"k") == b"y"
    with pytest.raises(TableKeyVersionMismatchError):
        tables.put(table, [(b"k", b"z", v)])
    tables.put(table, [(b"k", b"z", None)])  # unconditional
    assert value_of(tables, b"k") == b"z"
    assert v2 > v


def test_batch_is_all_or_nothing(tables: TableStore, table: str) -> None:
    (va,) = tables.put(table, [(b"a", b"1")])
    length = tables.get_info(table).length
    with pytest.raises(TableKeyVersionMismatchError):
        tables.put(table, [(b"b", b"2"), (b"c", b"3"), (b"a", b"new", va + 99)])
    assert tables.get(table, [b"a", b"b", b"c"])[1:] == [None, None]
    assert value_of(tables, b"a") == b"1"
    assert tables.get_info(table).length == length  # nothing was appended
    with pytest.raises(ValueError):
        tables.put(table, [(b"d", b"1"), (b"d", b"2")])
    versions = tables.put(table, [(b"b", b"2"), (b"c", b"3"), (b"a", b"new", va)])
    assert len(set(versions)) == 3
    assert [e.value for e in tables.get(table, [b"a", b"b", b"c"])] == [b"new", b"2", b"3"]


def test_remove(tables: TableStore, table: str) -> None:
    va, vb = tables.put(table, [(b"a", b"1"), (b"b", b"2")])
    tables.remove(table, [b"a"])
    assert value_of(tables, b"a") is None
    tables.remove(table, [b"a"])  # unconditional removal of an absent key: nothing to do
    with pytest.raises(TableKeyNotFoundError):
        tables.remove(table, [(b"a", va)])
    with pytest.raises(TableKeyVersionMismatchError):
        tables.remove(table, [(b"b", vb + 1)])
    tables.remove(table, [(b"b", vb)])
    assert tables.get(table, [b"a", b"b"]) == [None, None]
    # A removed key can come back, with a fresh, higher version.
    (va2,) = tables.put(table, [(b"a", b"again", NOT_EXISTS)])
    assert va2 > vb


def test_remove_batch_is_atomic(tables: TableStore, table: str) -> None:
    va, vb = tables.put(table, [(b"a", b"1"), (b"b", b"2")])
    with pytest.raises(TableKeyVersionMismatchError):
        tables.remove(table, [(b"a", va), (b"b", va)])
    assert value_of(tables, b"a") == b"1"
    tables.remove(table, [(b"a", va), (b"b", vb)])
    assert tables.get_info(table).key_count == 0


def test_key_and_value_limits(tables: TableStore, table: str) -> None:
    with pytest.raises(ValueError):
        tables.put(table, [(b"", b"x")])
    with pytest.raises(ValueError):
        tables.put(table, [(b"k" * 8193, b"x")])
    tables.put(table, [(b"k" * 8192, b"")])
    assert value_of(tables, b"k" * 8192) == b""


def test_create_and_delete_table(tables: TableStore, table: str) -> None:
    with pytest.raises(SegmentExistsError):
        tables.create_table(table)
    tables.put(table, [(b"a", b"1")])
    with pytest.raises(TableNotEmptyError):
        tables.delete_table(table, must_be_empty=True)
    tables.remove(table, [b"a"])
    tables.delete_table(table, must_be_empty=True)
    assert not tables.exists(table)
    with pytest.raises(SegmentNotFoundError):
        tables.get(table, [b"a"])
    tables.create_table(table)  # a new table under the old name starts empty
    assert tables.get(table, [b"a"]) == [None]


def test_iteration_with_continuation(tables: TableStore, table: str) -> None:
    keys = [f"key-{i:03d}".encode() for i in range(57)]
    for i in range(0, len(keys), 10):
        tables.put(table, [(k, k.upper()) for k in keys[i : i + 10]])
    seen = []
    token = None
    while True:
        page = tables.iterate_entries(table, token, limit=8)
        assert len(page.items) <= 8
        seen.extend(page.items)
        if page.continuation is None:
            break
        token = page.continuation
    assert [e.key for e in seen] == sorted(keys)
    assert all(e.value == e.key.upper() for e in seen)
    assert [k.key for k in tables.keys(table)] == sorted(keys)
    assert set(tables.get_all(table)) == set(keys)


def test_continuation_is_stable_across_updates_and_prefixes(tables: TableStore, table: str) -> None:
    tables.put(table, [(b"a/1", b""), (b"a/2", b""), (b"a/3", b""), (b"b/1", b""), (b"c", b"")])
    page = tables.iterate_keys(table, limit=2, prefix=b"a/")
    assert [k.key for k in page.items] == [b"a/1", b"a/2"]
    # Updates and removals behind the token and inserts before it do not disturb the rest.
    tables.put(table, [(b"a/0", b""), (b"a/2", b"changed")])
    tables.remove(table, [b"a/1"])
    rest = tables.iterate_keys(table, page.continuation, limit=10, prefix=b"a/")
    assert [k.key for k in rest.items] == [b"a/3"]
    assert rest.continuation is None
    assert list(tables.get_all(table, prefix=b"b/")) == [b"b/1"]
    assert tables.iterate_keys(table, prefix=b"zz").items == []
    with pytest.raises(ValueError):
        tables.iterate_keys(table, b"\x07bogus")


def test_index_rebuilds_after_restart(harness: StoreHarness) -> None:
    tables = TableStore(harness.store)
    tables.create_table(T)
    versions = tables.put(T, [(f"k{i}".encode(), f"v{i}".encode() * 50) for i in range(200)])
    tables.remove(T, [b"k7"])
    (v8,) = tables.put(T, [(b"k8", b"eight")])
    before = tables.get_all(T)

    reopened = TableStore(harness.restart())
    after = reopened.get_all(T)
    assert after == before
    assert b"k7" not in after
    assert after[b"k8"].version == v8
    assert after[b"k9"].version == versions[9]
    # Conditional updates keep working against recovered versions.
    with pytest.raises(TableKeyVersionMismatchError):
        reopened.put(T, [(b"k9", b"x", versions[8])])
    reopened.put(T, [(b"k9", b"x", versions[9])])


def test_rebuild_spans_reads_larger_than_chunks(harness: StoreHarness) -> None:
    tables = TableStore(harness.store)
    tables.create_table(T)
    big = bytes(range(256)) * 2000  # 512 KB per value; batches straddle read chunks
    tables.put(T, [(b"a", big), (b"b", big[::-1])])
    tables.put(T, [(b"c", b"small")])
    reopened = TableStore(harness.restart(), TableConfig(read_chunk_bytes=100_000))
    assert [e.value for e in reopened.get(T, [b"a", b"b", b"c"])] == [big, big[::-1], b"small"]


def test_racing_conditional_updates_exactly_one_wins(tables: TableStore, table: str) -> None:
    (v0,) = tables.put(table, [(b"k", b"start")])
    results: list[object] = []
    barrier = threading.Barrier(8)

    def contender(i: int) -> None:
        barrier.wait()
        try:
            results.append(tables.put(table, [(b"k", f"w{i}".encode(), v0)]))
        except TableKeyVersionMismatchError as e:
            results.append(e)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wins = [r for r in results if isinstance(r, list)]
    assert len(wins) == 1
    assert tables.get(table, [b"k"])[0].version == wins[0][0]


def test_racing_instances_exactly_one_creates(harness: StoreHarness) -> None:
    """Two TableStore instances over one store: the conditional append keeps them honest."""
    first, second = TableStore(harness.store), TableStore(harness.store)
    first.create_table(T)
    second.get(T, [b"k"])  # load second's index before first writes
    first.put(T, [(b"other", b"1")])
    second.put(T, [(b"k", b"b", NOT_EXISTS)])  # second's index was stale: it caught up first
    with pytest.raises(TableKeyVersionMismatchError):
        first.put(T, [(b"k", b"a", NOT_EXISTS)])
    assert first.get(T, [b"k"])[0].value == b"b"
    assert first.get(T, [b"other"]) == second.get(T, [b"other"])


def test_concurrent_compare_and_set_counter(tables: TableStore, table: str) -> None:
    """Threads increment one counter by read + conditional put; no increment is lost."""
    tables.put(table, [(b"n", b"0")])
    per_thread, thread_count = 15, 4

    def worker() -> None:
        done = 0
        while done < per_thread:
            entry = tables.get(table, [b"n"])[0]
            try:
                tables.put(table, [(b"n", str(int(entry.value) + 1).encode(), entry.version)])
                done += 1
            except TableKeyVersionMismatchError:
                pass

    threads = [threading.Thread(target=worker) for _ in range(thread_count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert value_of(tables, b"n") == str(per_thread * thread_count).encode()


def test_counter_across_instances(harness: StoreHarness) -> None:
    """Writers in two TableStore instances over one store: conditional appends, catch-up on
    BadOffsetError and re-checks lose no increment (the path two controllers would take)."""
    instances = [TableStore(harness.store), TableStore(harness.store)]
    instances[0].create_table(T)
    instances[0].put(T, [(b"n", b"0")])

    def worker(tables: TableStore) -> None:
        done = 0
        while done < 10:
            entry = tables.get(T, [b"n"])[0]
            try:
                tables.put(T, [(b"n", str(int(entry.value) + 1).encode(), entry.version)])
                done += 1
            except TableKeyVersionMismatchError:
                pass

    threads = [threading.Thread(target=worker, args=(instances[i % 2],)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [t.get(T, [b"n"])[0].value for t in instances] == [b"40", b"40"]


def small_compaction() -> TableConfig:
    return TableConfig(compaction_min_bytes=4096, compaction_max_prefix_bytes=2048)


def test_compaction_keeps_data_and_versions(harness: StoreHarness) -> None:
    tables = TableStore(harness.store, small_compaction())
    tables.create_table(T)
    stable = tables.put(T, [(f"stable{i}".encode(), f"s{i}".encode()) for i in range(20)])
    for round_ in range(60):
        tables.put(T, [(f"hot{i}".encode(), f"{round_}-{i}".encode() * 10) for i in range(5)])
    tables.remove(T, [b"hot4"])
    info = tables.get_info(T)
    assert info.start_offset > 0, "compaction should have truncated the segment's head"
    # Compaction keeps the retained bytes near its trigger size, against 60 rounds of overwrites.
    assert info.length - info.start_offset < 2 * 4096
    assert harness.store.get_info(T).start_offset == info.start_offset

    expected = {f"stable{i}".encode(): (f"s{i}".encode(), stable[i]) for i in range(20)}
    expected.update({f"hot{i}".encode(): (f"59-{i}".encode() * 10, None) for i in range(4)})
    got = tables.get_all(T)
    assert set(got) == set(expected)
    for key, (value, version) in expected.items():
        assert got[key].value == value
        if version is not None:
            assert got[key].version == version  # compaction kept the original version

    # A version read before compaction still works for a conditional update.
    tables.put(T, [(b"stable0", b"updated", stable[0])])
    # And the compacted segment rebuilds to the same state.
    before = {k: (e.value, e.version) for k, e in tables.get_all(T).items()}
    reopened = TableStore(harness.restart(), small_compaction())
    assert {k: (e.value, e.version) for k, e in reopened.get_all(T).items()} == before


def test_explicit_compact_truncates_everything_dead(tables: TableStore, table: str) -> None:
    for i in range(30):
        tables.put(table, [(b"x", str(i).encode() * 100)])
    (vy,) = tables.put(table, [(b"y", b"why")])
    tables.remove(table, [b"x"])
    length = tables.get_info(table).length
    tables.compact(table)
    info = tables.get_info(table)
    assert info.start_offset == length
    assert tables.get(table, [b"x", b"y"])[1].version == vy
    assert tables.get(table, [b"x"]) == [None]


def test_get_survives_concurrent_compaction(harness: StoreHarness) -> None:
    tables = TableStore(harness.store, small_compaction())
    tables.create_table(T)
    tables.put(T, [(b"fixed", b"F" * 300)])
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                assert tables.get(T, [b"fixed"])[0].value == b"F" * 300
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    th = threading.Thread(target=reader)
    th.start()
    try:
        for i in range(80):
            tables.put(T, [(b"churn", str(i).encode() * 60)])
    finally:
        stop.set()
        th.join()
    assert not errors
    assert tables.get_info(T).start_offset > 0


def test_batch_encoding_roundtrip_and_crc() -> None:
    entries = [EncodedEntry(b"k", b"v"), EncodedEntry(b"gone", None), EncodedEntry(b"old", b"o", 7)]
    data, positions = encode_batch(entries)
    decoded = list(decode_batch(data, 1000))
    assert [(d.key, d.value) for d in decoded] == [(b"k", b"v"), (b"gone", None), (b"old", b"o")]
    assert [d.offset for d in decoded] == [1000 + p for p in positions]
    assert decoded[0].version == 1000 + positions[0]
    assert decoded[2].version == 7
    assert data[decoded[0].value_offset - 1000 :].startswith(b"v")
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    with pytest.raises(DataCorruptionError):
        list(decode_batch(bytes(broken), 0))


def test_update_mixes_puts_and_removals_all_or_nothing(tables: TableStore, table: str) -> None:
    va, vb = tables.put(table, [(b"a", b"1"), (b"b", b"2")])
    length = tables.get_info(table).length
    # One failed condition (on a removal) fails the puts beside it too: nothing is appended.
    with pytest.raises(TableKeyVersionMismatchError):
        tables.update(table, [(b"c", b"3", None), (b"a", None, va + 1)])
    with pytest.raises(TableKeyVersionMismatchError):
        tables.update(table, [(b"a", None, None), (b"b", b"x", NOT_EXISTS)])
    assert tables.get_info(table).length == length
    assert [e.value if e else None for e in tables.get(table, [b"a", b"b", b"c"])] == [b"1", b"2", None]
    # Applied: a removal, a conditional put, a fresh key and a removal of an absent key, in one batch.
    versions = tables.update(table, [(b"a", None, va), (b"b", b"two", vb), (b"c", b"3", NOT_EXISTS),
                                     (b"absent", None, None)])
    assert versions[0] is None and versions[3] is None
    assert versions[1] is not None and versions[2] is not None and vb < versions[1] < versions[2]
    b, c = tables.get(table, [b"b", b"c"])
    assert (b.value, b.version, c.value, c.version) == (b"two", versions[1], b"3", versions[2])
    assert tables.get(table, [b"a"]) == [None]
    with pytest.raises(ValueError):
        tables.update(table, [(b"b", None, None), (b"b", b"again", None)])  # one key twice
    with pytest.raises(ValueError):
        tables.update(table, [(b"b", None, NOT_EXISTS)])  # a removal cannot expect absence


def test_iteration_within_a_key_range(tables: TableStore, table: str) -> None:
    keys = [f"r/{i:02d}".encode() for i in range(30)] + [b"q", b"s"]
    tables.put(table, [(k, k) for k in keys])
    page = tables.iterate_keys(table, limit=4, prefix=b"r/", start=b"r/05", end=b"r/12")
    assert [k.key for k in page.items] == [b"r/05", b"r/06", b"r/07", b"r/08"]
    rest = tables.iterate_entries(table, page.continuation, limit=100, prefix=b"r/", start=b"r/05", end=b"r/12")
    assert [e.key for e in rest.items] == [b"r/09", b"r/10", b"r/11"] and rest.continuation is None
    # A bound below the prefix does not widen it; an end at the page's edge leaves no continuation.
    assert [k.key for k in tables.iterate_keys(table, prefix=b"r/", start=b"a", end=b"r/02").items] == \
        [b"r/00", b"r/01"]
    exact = tables.iterate_keys(table, limit=2, start=b"r/28")
    assert [k.key for k in exact.items] == [b"r/28", b"r/29"] and exact.continuation is not None
    assert [k.key for k in tables.iterate_keys(table, exact.continuation, start=b"r/28").items] == [b"s"]
    assert tables.iterate_keys(table, limit=2, start=b"r/28", end=b"s").continuation is None
