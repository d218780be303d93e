"""KeyValueTable against a real server: versions, conditions, key families, iteration, contention,
restart."""

from __future__ import annotations

import threading

import pytest

from millrace import (
    Insert,
    KeyValueTableNotFoundError,
    Put,
    Remove,
    ScopeNotEmptyError,
    StreamManager,
    TableEntry,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.protocol.errors import ScopeNotFoundError
from tests.server_process import ServerProcess


def test_first_calls_table_part(uri: str) -> None:
    """The key-value lines of the issue's "first calls", exactly as written."""
    sm = StreamManager(uri)
    sm.create_scope("iot")
    table = sm.create_key_value_table("iot", "devices")
    v1 = table.put("sensor-7", b"online")                    # returns the new version
    table.put("sensor-7", b"offline", if_version=v1)         # conditional; a stale version raises
    value, version = table.get("sensor-7")
    assert value == b"offline" and version > v1
    with pytest.raises(TableKeyVersionMismatchError):
        table.put("sensor-7", b"stale", if_version=v1)
    assert table.get("sensor-7") == (b"offline", version)
    sm.close()


def test_conditions(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kv")
        table = sm.create_key_value_table("kv", "conditions", partitions=4)
        assert table.get("absent") is None
        v = table.put_if_absent("k", b"1")
        with pytest.raises(TableKeyVersionMismatchError, match=r"^kv/conditions: key 'k' exists"):
            table.put_if_absent("k", b"2")  # named as the caller wrote it, not as stored
        with pytest.raises(TableKeyNotFoundError, match=r"^kv/conditions: key 'other' does not exist"):
            table.put("other", b"x", if_version=v)
        with pytest.raises(TableKeyVersionMismatchError):
            table.delete("k", if_version=v + 1)
        table.delete("k", if_version=v)
        assert table.get("k") is None
        table.delete("k")  # unconditional removal of an absent key: nothing to do
        with pytest.raises(ValueError):
            table.put_all([("a", b"1"), ("b", b"2")])  # several keys need a family to be atomic


def test_key_families_are_atomic_and_iterable(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kv2")
        table = sm.create_key_value_table("kv2", "families", partitions=4)
        versions = table.put_all([(f"k{i:04d}", f"v{i}".encode()) for i in range(1200)], key_family="big")
        assert len(versions) == 1200 and len(set(versions)) == 1200
        v0 = versions[0]
        # One stale condition fails the whole batch: neither key changes.
        with pytest.raises(TableKeyVersionMismatchError, match="key 'k0000' of key family 'big'"):
            table.put_all([("k0001", b"new"), ("k0000", b"new", v0 + 1)], key_family="big")
        assert table.get_all(["k0000", "k0001"], key_family="big") == [(b"v0", v0), (b"v1", versions[1])]
        # The same key in another family, or in none, is another key.
        table.put("k0000", b"small", key_family="small")
        table.put("k0000", b"loose")
        for i in range(20):
            table.put(f"loose-{i}", b"x")
        big = list(table.entries(key_family="big"))  # more than one page of 1000
        assert [e.key for e in big] == [f"k{i:04d}" for i in range(1200)]
        assert big[0] == TableEntry("k0000", b"v0", v0, "big")
        assert [k for k, _ in table.keys(key_family="small")] == ["k0000"]
        loose = sorted(k for k, _ in table.keys(key_family=None))
        assert loose == sorted(["k0000", *(f"loose-{i}" for i in range(20))])
        table.remove_all(["k0000", ("k0001", versions[1])], key_family="big")
        assert table.get_all(["k0000", "k0001", "k0002"], key_family="big")[:2] == [None, None]
        assert table.get("k0000", key_family="small") is not None


def test_conditional_increments_under_contention_lose_nothing(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("race")
        sm.create_key_value_table("race", "counters", partitions=2).put("hits", b"0")
    workers, increments = 4, 25
    conflicts: list[int] = []

    def increment() -> None:
        with StreamManager(uri) as own:
            table = own.key_value_table("race", "counters")
            lost = 0
            for _ in range(increments):
                while True:
                    found = table.get("hits")
                    assert found is not None
                    value, version = found
                    try:
                        table.put("hits", str(int(value) + 1).encode(), if_version=version)
                        break
                    except TableKeyVersionMismatchError:
                        lost += 1
            conflicts.append(lost)

    threads = [threading.Thread(target=increment) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(conflicts) == workers  # every worker finished
    with StreamManager(uri) as sm:
        found = sm.key_value_table("race", "counters").get("hits")
        assert found is not None and int(found[0]) == workers * increments


def test_tables_are_listed_deleted_and_guarded(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kvlist")
        sm.create_key_value_table("kvlist", "a", partitions=3)
        again = sm.create_key_value_table("kvlist", "a", partitions=5)
        assert again.partitions == 3  # the existing table, as it was created
        sm.create_key_value_table("kvlist", "b")
        assert sm.list_key_value_tables("kvlist") == ["a", "b"]
        sm.delete_key_value_table("kvlist", "a")
        assert sm.list_key_value_tables("kvlist") == ["b"]
        with pytest.raises(KeyValueTableNotFoundError):
            sm.key_value_table("kvlist", "a")
        with pytest.raises(ScopeNotFoundError):
            sm.create_key_value_table("no-such-scope", "t")
        # The controller's own tables are not key-value tables: the client cannot reach them.
        with pytest.raises(KeyValueTableNotFoundError):
            sm.key_value_table("_system", "_tables")


def test_versions_survive_a_server_crash(tmp_path) -> None:
    data = str(tmp_path / "data")
    with ServerProcess(data) as server, StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("durable")
        table = sm.create_key_value_table("durable", "t", partitions=2)
        version = table.put("k", b"v", key_family="f")
        server.kill()
    with ServerProcess(data) as server, StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        table = sm.key_value_table("durable", "t")
        assert table.get("k", key_family="f") == (b"v", version)
        assert table.put("k", b"w", key_family="f", if_version=version) > version


def test_a_scope_holding_a_table_is_not_empty(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("tables-only")
        sm.create_key_value_table("tables-only", "settings", partitions=2)
        with pytest.raises(ScopeNotEmptyError):
            sm.delete_scope("tables-only")
        assert "tables-only" in sm.list_scopes()
        assert sm.key_value_table("tables-only", "settings").partitions == 2  # still whole
        sm.delete_key_value_table("tables-only", "settings")
        sm.delete_scope("tables-only")
        assert "tables-only" not in sm.list_scopes()


def test_byte_keys_and_families(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kvbytes")
        table = sm.create_key_value_table("kvbytes", "raw", partitions=3)
        binary = b"\x00\xff\xfe-id"  # not UTF-8
        v = table.put(binary, b"one", key_family=b"\x01fam")
        assert table.get(binary, key_family=b"\x01fam") == (b"one", v)
        assert table.get(binary) is None  # another family (none) is another key
        table.put("text", b"same")  # a str key is its UTF-8 bytes: one key, two spellings
        assert table.get(b"text") == table.get("text")
        with pytest.raises(TableKeyVersionMismatchError, match=r"key b'\\x00\\xff\\xfe-id' of key family b'\\x01fam'"):
            table.put_if_absent(binary, b"again", key_family=b"\x01fam")
        entries = list(table.entries(key_family=b"\x01fam", raw_keys=True))
        assert entries == [TableEntry(binary, b"one", v, b"\x01fam")]
        with pytest.raises(ValueError, match="raw_keys=True"):
            list(table.keys(key_family=b"\x01fam"))  # not text: asks for raw keys
        with pytest.raises(TypeError):
            table.put(7, b"x")  # type: ignore[arg-type]


def test_secondary_key_ranges_and_prefixes(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kvrange")
        table = sm.create_key_value_table("kvrange", "readings", partitions=4)
        # The family is the primary key (a device), the key the secondary key (a time), as Pravega's.
        table.put_all([(f"2026-11-{d:02d}", f"{d}".encode()) for d in range(1, 31)], key_family="dev-1")
        table.put_all([(f"2026-12-{d:02d}", b"dec") for d in range(1, 4)], key_family="dev-1")
        table.put("2026-11-15", b"other device", key_family="dev-2")
        week = [e.key for e in table.entries(key_family="dev-1", start="2026-11-08", end="2026-11-15")]
        assert week == [f"2026-11-{d:02d}" for d in range(8, 15)]
        december = [k for k, _ in table.keys(key_family="dev-1", prefix="2026-12-")]
        assert december == ["2026-12-01", "2026-12-02", "2026-12-03"]
        tail = [e.value for e in table.entries(key_family="dev-1", prefix="2026-11-", start="2026-11-29")]
        assert tail == [b"29", b"30"]
        assert list(table.entries(key_family="dev-1", start="2027")) == []
        # Keys without a family are spread over the partitions, and still come back in key order.
        for i in range(40):
            table.put(f"loose-{i:02d}", b"x")
        loose = [k for k, _ in table.keys(start="loose-10", end="loose-20")]
        assert loose == [f"loose-{i:02d}" for i in range(10, 20)]
        assert [k for k, _ in table.keys(prefix="loose-3")] == [f"loose-3{i}" for i in range(10)]


def test_update_applies_puts_and_removals_atomically(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("kvupdate")
        table = sm.create_key_value_table("kvupdate", "orders", partitions=2)
        v_open, v_total = table.put_all([("open", b"1"), ("total", b"10")], key_family="cart")
        # A stale condition on the removal fails the whole update: no put lands.
        with pytest.raises(TableKeyVersionMismatchError, match=r"^kvupdate/orders: key 'open' of key family 'cart'"):
            table.update([Put("total", b"11", if_version=v_total), Insert("item-1", b"apple"),
                          Remove("open", if_version=v_open + 1)], key_family="cart")
        assert table.get_all(["open", "total", "item-1"], key_family="cart") == [(b"1", v_open), (b"10", v_total), None]
        versions = table.update([Put("total", b"11", if_version=v_total), Insert("item-1", b"apple"),
                                 Remove("open", if_version=v_open)], key_family="cart")
        assert versions[2] is None and versions[0] is not None and versions[1] is not None
        assert table.get_all(["open", "total", "item-1"], key_family="cart") == \
            [None, (b"11", versions[0]), (b"apple", versions[1])]
        with pytest.raises(TableKeyVersionMismatchError):
            table.update([Insert("item-1", b"pear")], key_family="cart")
        with pytest.raises(ValueError, match="needs a key family"):
            table.update([Put("a", b"1"), Remove("b")])
        assert table.update([Remove(b"no-family-key")]) == [None]  # one key needs no family
        assert table.update([]) == []
