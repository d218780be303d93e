from __future__ import annotations

import random
import threading

import pytest

from millrace.store.controller import (
    Controller,
    InvalidStreamCutError,
    RetentionPolicy,
    ScalingPolicy,
    ScalingType,
    StreamConfiguration,
    StreamNotSealedError,
    StreamSealedError,
    StreamState,
    key_hash,
    segment_id,
)
from millrace.store.controller.controller import KV_TABLES_TABLE
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.controller.records import StreamRecord
from millrace.store.errors import (
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentSealedError,
    StreamExistsError,
    StreamNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness

CONFIG = StreamConfiguration(
    initial_segments=3,
    scaling=ScalingPolicy(
        ScalingType.BY_RATE_IN_EVENTS_PER_SEC, target_rate=100, scale_factor=2, min_segments=3
    ),
    retention=RetentionPolicy.by_time(86_400_000),
)


def test_scope_lifecycle(controller: Controller) -> None:
    assert controller.create_scope("alpha")
    assert not controller.create_scope("alpha")
    assert controller.create_scope("beta")
    assert controller.list_scopes() == ["alpha", "beta"]
    controller.create_stream("alpha", "s")
    with pytest.raises(ScopeNotEmptyError):
        controller.delete_scope("alpha")
    controller.delete_scope("beta")
    assert controller.list_scopes() == ["alpha"]
    with pytest.raises(ScopeNotFoundError):
        controller.delete_scope("beta")
    with pytest.raises(ScopeNotFoundError):
        controller.list_streams("beta")
    for bad in ["", "a/b", "..", "x" * 250, "sp ace"]:
        with pytest.raises(ValueError):
            controller.create_scope(bad)
    with pytest.raises(ValueError):
        controller.create_scope("_system")


def test_create_stream_makes_equal_segments(harness: StoreHarness, controller: Controller) -> None:
    controller.create_scope("sc")
    info = controller.create_stream("sc", "orders", CONFIG)
    assert (info.state, info.config, info.current_epoch) == (StreamState.ACTIVE, CONFIG, 0)
    segments = controller.get_current_segments("sc", "orders")
    assert [s.name for s in segments] == [f"sc/orders/{i}.#epoch.0" for i in range(3)]
    assert [s.segment_id for s in segments] == [segment_id(i, 0) for i in range(3)]
    assert [(s.key_start, s.key_end) for s in segments] == [(0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0)]
    for s in segments:
        assert harness.store.exists(s.name)
    with pytest.raises(StreamExistsError):
        controller.create_stream("sc", "orders")
    with pytest.raises(ScopeNotFoundError):
        controller.create_stream("nope", "orders")
    controller.create_stream("sc", "__consumer_offsets")  # every Kafka topic name is a stream name
    assert controller.list_streams("sc") == ["__consumer_offsets", "orders"]
    (epoch0,) = controller.get_epoch_history("sc", "orders")
    assert epoch0.epoch == 0 and len(epoch0.segments) == 3 and epoch0.created_ms == info.created_ms
    with pytest.raises(StreamNotFoundError):
        controller.get_stream("sc", "missing")


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16])
def test_key_to_segment_covers_key_space_exactly_once(controller: Controller, count: int) -> None:
    controller.create_scope("sc")
    controller.create_stream("sc", "s", StreamConfiguration(initial_segments=count))
    segments = controller.get_current_segments("sc", "s")
    rng = random.Random(count)
    probes = [0.0, 1.0 - 2**-53] + [s.key_start for s in segments] + [rng.random() for _ in range(500)]
    for h in probes:
        owners = [s for s in segments if s.contains(h)]
        assert len(owners) == 1, h
        assert controller.get_segment_for_hash("sc", "s", h) == owners[0]
    for key in ["a", "b", "user-42", ""]:
        assert controller.get_segment_for_key("sc", "s", key).contains(key_hash(key))
    with pytest.raises(ValueError):
        controller.get_segment_for_hash("sc", "s", 1.0)


def test_seal_then_delete(harness: StoreHarness, controller: Controller) -> None:
    controller.create_scope("sc")
    controller.create_stream("sc", "s", CONFIG)
    names = [s.name for s in controller.get_current_segments("sc", "s")]
    harness.store.append(names[0], b"hello").result()
    with pytest.raises(StreamNotSealedError):
        controller.delete_stream("sc", "s")
    controller.seal_stream("sc", "s")
    controller.seal_stream("sc", "s")  # idempotent
    assert controller.get_stream("sc", "s").state == StreamState.SEALED
    for name in names:
        assert harness.store.get_info(name).sealed
    with pytest.raises(SegmentSealedError):
        harness.store.append(names[0], b"more").result()
    with pytest.raises(StreamSealedError):
        controller.update_stream("sc", "s", StreamConfiguration())
    controller.delete_stream("sc", "s")
    for name in names:
        assert not harness.store.exists(name)
    assert not controller.stream_exists("sc", "s")
    assert controller.list_streams("sc") == []
    assert controller.tables.get_all("_system/_tables/epochs") == {}
    controller.delete_scope("sc")
    # The name is free again.
    controller.create_scope("sc")
    controller.create_stream("sc", "s")
    assert len(controller.get_current_segments("sc", "s")) == 1


def test_update_stream_is_conditional(controller: Controller) -> None:
    controller.create_scope("sc")
    version = controller.create_stream("sc", "s").version
    new = StreamConfiguration(retention=RetentionPolicy.by_size(1 << 30))
    results: list[object] = []
    barrier = threading.Barrier(6)

    def update(i: int) -> None:
        config = StreamConfiguration(retention=RetentionPolicy.by_size(i + 1))
        barrier.wait()
        try:
            results.append((i, controller.update_stream("sc", "s", config, expected_version=version)))
        except TableKeyVersionMismatchError as e:
            results.append(e)

    threads = [threading.Thread(target=update, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wins = [r for r in results if isinstance(r, tuple)]
    assert len(wins) == 1
    ((winner, new_version),) = wins
    info = controller.get_stream("sc", "s")
    assert info.version == new_version
    assert info.config.retention == RetentionPolicy.by_size(winner + 1)
    # Unconditional updates always land.
    controller.update_stream("sc", "s", new)
    assert controller.get_stream("sc", "s").config == new


def test_truncate_stream(harness: StoreHarness, controller: Controller) -> None:
    controller.create_scope("sc")
    controller.create_stream("sc", "s", StreamConfiguration(initial_segments=2))
    a, b = controller.get_current_segments("sc", "s")
    for seg in (a, b):
        harness.store.append(seg.name, b"x" * 100).result()
    controller.truncate_stream("sc", "s", {a.segment_id: 40, b.name: 60})
    assert harness.store.get_info(a.name).start_offset == 40
    assert harness.store.get_info(b.name).start_offset == 60
    assert controller.get_stream("sc", "s").truncation == {a.segment_id: 40, b.segment_id: 60}
    with pytest.raises(InvalidStreamCutError):
        controller.truncate_stream("sc", "s", {a.segment_id: 50})  # misses half the key space
    with pytest.raises(InvalidStreamCutError):
        controller.truncate_stream("sc", "s", {a.segment_id: 50, b.segment_id: 101})  # past the end
    with pytest.raises(InvalidStreamCutError):
        controller.truncate_stream("sc", "s", {a.segment_id: 30, b.segment_id: 70})  # backwards
    with pytest.raises(InvalidStreamCutError):
        controller.truncate_stream("sc", "s", {a.segment_id: 50, segment_id(9, 0): 0})
    controller.truncate_stream("sc", "s", {a.segment_id: 100, b.segment_id: 60})
    assert harness.store.get_info(a.name).start_offset == 100


def test_interrupted_create_is_finished_by_a_retry(harness: StoreHarness, controller: Controller) -> None:
    controller.create_scope("sc")
    real_create = harness.store.create_segment
    calls = {"n": 0}

    def flaky(name: str, attributes=None):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("store went away")
        return real_create(name, attributes)

    harness.store.create_segment = flaky
    try:
        with pytest.raises(ConnectionError):
            controller.create_stream("sc", "s", CONFIG)
    finally:
        harness.store.create_segment = real_create
    assert not controller.stream_exists("sc", "s")  # half-created streams are invisible
    assert controller.list_streams("sc") == []
    info = controller.create_stream("sc", "s", CONFIG)
    assert info.state == StreamState.ACTIVE
    assert all(harness.store.exists(s.name) for s in controller.get_current_segments("sc", "s"))
    with pytest.raises(StreamExistsError):
        controller.create_stream("sc", "s", CONFIG)


def test_delete_scope_racing_create_stream_leaves_no_orphans(controller: Controller) -> None:
    for round_ in range(15):
        scope = f"race{round_}"
        controller.create_scope(scope)
        barrier = threading.Barrier(2)
        outcome: dict[str, object] = {}

        def create(scope: str = scope, barrier=barrier, outcome=outcome) -> None:
            barrier.wait()
            try:
                controller.create_stream(scope, "s")
                outcome["create"] = "ok"
            except ScopeNotFoundError:
                outcome["create"] = "no scope"

        def delete(scope: str = scope, barrier=barrier, outcome=outcome) -> None:
            barrier.wait()
            try:
                controller.delete_scope(scope)
                outcome["delete"] = "ok"
            except ScopeNotEmptyError:
                outcome["delete"] = "not empty"

        threads = [threading.Thread(target=create), threading.Thread(target=delete)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(outcome.values()) in (["not empty", "ok"], ["no scope", "ok"]), outcome
        assert controller.scope_exists(scope) == (outcome["create"] == "ok")
        streams = controller.tables.get_all("_system/_tables/streams", prefix=f"{scope}/".encode())
        assert bool(streams) == (outcome["create"] == "ok")


def test_delete_scope_racing_create_kv_table_leaves_no_orphans(controller: Controller) -> None:
    """A scope holding a key-value table is not empty; a table created while its scope is deleted
    either keeps the scope or withdraws, never outlives it."""
    tables = KeyValueTables(controller)
    controller.create_scope("kv")
    tables.create("kv", "t", 1)
    with pytest.raises(ScopeNotEmptyError):
        controller.delete_scope("kv")
    tables.delete("kv", "t")
    controller.delete_scope("kv")
    for round_ in range(15):
        scope = f"kvrace{round_}"
        controller.create_scope(scope)
        barrier = threading.Barrier(2)
        outcome: dict[str, object] = {}

        def create(scope: str = scope, barrier=barrier, outcome=outcome) -> None:
            barrier.wait()
            try:
                tables.create(scope, "t", 1)
                outcome["create"] = "ok"
            except ScopeNotFoundError:
                outcome["create"] = "no scope"

        def delete(scope: str = scope, barrier=barrier, outcome=outcome) -> None:
            barrier.wait()
            try:
                controller.delete_scope(scope)
                outcome["delete"] = "ok"
            except ScopeNotEmptyError:
                outcome["delete"] = "not empty"

        threads = [threading.Thread(target=create), threading.Thread(target=delete)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        # Both may fail (the create saw the scope marked, the delete saw the record before it was
        # withdrawn); both can never succeed.
        assert outcome != {"create": "ok", "delete": "ok"}, outcome
        records = controller.tables.get_all(KV_TABLES_TABLE, prefix=f"{scope}/".encode())
        assert bool(records) == (outcome["create"] == "ok")
        assert controller.scope_exists(scope) == (outcome["delete"] != "ok")


def test_metadata_survives_restart(harness: StoreHarness) -> None:
    controller = Controller(harness.store, TableStore(harness.store))
    controller.create_scope("keep")
    controller.create_scope("gone")
    controller.delete_scope("gone")
    controller.create_stream("keep", "live", CONFIG)
    controller.create_stream("keep", "sealed", StreamConfiguration(initial_segments=2))
    controller.seal_stream("keep", "sealed")
    seg = controller.get_current_segments("keep", "live")
    for s in seg:
        harness.store.append(s.name, b"data").result()
    controller.truncate_stream("keep", "live", {s.segment_id: 2 for s in seg})
    version = controller.update_stream("keep", "live", CONFIG)
    before = {name: controller.get_stream("keep", name) for name in ("live", "sealed")}
    history = controller.get_epoch_history("keep", "live")
    owner = controller.get_segment_for_key("keep", "live", "k")

    store = harness.restart()
    again = Controller(store, TableStore(store))
    assert again.list_scopes() == ["keep"]
    assert again.list_streams("keep") == ["live", "sealed"]
    for name, info in before.items():
        assert again.get_stream("keep", name) == info
    assert again.get_current_segments("keep", "live") == seg
    assert again.get_epoch_history("keep", "live") == history
    assert again.get_stream("keep", "live").version == version
    assert again.get_segment_for_key("keep", "live", "k") == owner
    # Versioned updates continue against the recovered records.
    with pytest.raises(TableKeyVersionMismatchError):
        again.update_stream("keep", "live", StreamConfiguration(), expected_version=version - 1)
    again.update_stream("keep", "live", StreamConfiguration(), expected_version=version)
    again.delete_stream("keep", "sealed")
    assert again.list_streams("keep") == ["live"]


def test_stream_record_skips_unknown_fields() -> None:
    record = StreamRecord(StreamState.SEALED, CONFIG, 123, 4, 9, {segment_id(1, 2): 77})
    data = record.encode()
    # A field a later version adds (tag 200) must not trouble this version's reader.
    extended = data + bytes([200]) + (3).to_bytes(4, "little") + b"new"
    assert StreamRecord.decode(extended) == record
