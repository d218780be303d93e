"""Container operations: their log encoding, and validation against the accepted metadata."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from millrace.store.containers import operations as ops
from millrace.store.containers.checkpoints import CheckpointPolicy
from millrace.store.containers.memory_state import MemoryState
from millrace.store.containers.metadata import ContainerMetadata
from millrace.store.containers.rates import RateRegistry
from millrace.store.containers.read_index import ReadIndex
from millrace.store.contracts import AttributeUpdate
from millrace.store.contracts import AttributeUpdateType as T
from millrace.store.durablelog.interface import LogAddress
from millrace.store.errors import (
    BadAttributeUpdateError,
    BadOffsetError,
    DataCorruptionError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
)

EVERY_OPERATION: list[ops.Operation] = [
    ops.Append(3, 10, b"hello", {}),
    ops.Append(3, 15, b"x" * 300, {"writer": 7, "gone": None}),
    ops.Create(1, "scope/stream/0", {"k": 2}, 1_700_000_000_000),
    ops.Seal(4),
    ops.Merge(1, 2, 30, 40),
    ops.Truncate(1, 7),
    ops.Delete(9),
    ops.Attributes(1, {"a": 5, "b": None}),
    ops.Checkpoint({"container": 0, "next_id": 3, "segments": [], "lengths": {1: 5, 2: 0}}),
    ops.StorageFlushed(1, 0, 10, "containers/0/s/E1-O0-abc"),
]


def test_every_operation_decodes_to_what_was_encoded():
    frame = b"".join(part for op in EVERY_OPERATION for part in op.frame_parts())
    assert ops.decode_frame(frame) == EVERY_OPERATION
    for op in EVERY_OPERATION:
        assert ops.decode(op.encode()) == op


def test_an_append_keeps_its_event_count_out_of_the_log():
    live = ops.Append(1, 0, b"batch", {}, events=12)
    replayed = ops.decode(live.encode())
    assert isinstance(replayed, ops.Append)
    assert replayed.events is None  # replayed appends are not counted as load again
    assert replayed.data == b"batch"


def test_undecodable_payloads_are_corruption():
    with pytest.raises(DataCorruptionError):
        ops.decode(bytes([200]) + b"{}")
    with pytest.raises(DataCorruptionError):
        ops.decode(bytes([ops.Seal.CODE]) + b"not json")
    with pytest.raises(DataCorruptionError):
        ops.decode_frame(b"".join(ops.Seal(1).frame_parts())[:-1])


def test_a_taken_operation_code_is_refused():
    with pytest.raises(TypeError, match="taken"):

        class Clash(ops.Seal):
            CODE: ClassVar[int] = ops.Append.CODE


def _accept(verdict: ops.Prepared, metadata: ContainerMetadata) -> ops.Operation:
    assert isinstance(verdict, ops.Operation)
    verdict.accept(metadata)
    return verdict


def _metadata_with(name: str) -> ContainerMetadata:
    metadata = ContainerMetadata()
    _accept(ops.Create.prepare(metadata, name, {"writer": 1}), metadata)
    return metadata


def test_prepare_validates_against_the_accepted_layer():
    metadata = _metadata_with("s/a")
    # Its creation is accepted, not durable: a second create is refused once it is (readers see it).
    again = ops.Create.prepare(metadata, "s/a", {})
    assert isinstance(again, ops.AlreadyDone)
    with pytest.raises(SegmentExistsError):
        again.value()
    metadata.visible["s/a"] = metadata.by_name["s/a"]
    with pytest.raises(SegmentExistsError):
        ops.Create.prepare(metadata, "s/a", {})
    with pytest.raises(SegmentNotFoundError):
        ops.Append.prepare(metadata, "s/missing", b"x", None, (), 1)
    _accept(ops.Append.prepare(metadata, "s/a", b"abc", 0, (), 1), metadata)
    # The next append is validated against the first, although neither is durable yet.
    with pytest.raises(BadOffsetError):
        ops.Append.prepare(metadata, "s/a", b"d", 0, (), 1)
    with pytest.raises(BadAttributeUpdateError):
        ops.Append.prepare(metadata, "s/a", b"d", 3, [AttributeUpdate("writer", 5, T.REPLACE_IF_EQUALS, 0)], 1)
    assert ops.Append.prepare(metadata, "s/a", b"d", 3, (), 1).offset == 3


def test_a_repeated_seal_or_truncate_logs_nothing():
    metadata = _metadata_with("s/a")
    _accept(ops.Append.prepare(metadata, "s/a", b"abcdef", None, (), 1), metadata)
    _accept(ops.Truncate.prepare(metadata, "s/a", 2), metadata)
    again = ops.Truncate.prepare(metadata, "s/a", 1)
    assert isinstance(again, ops.AlreadyDone) and again.value() is None
    _accept(ops.Seal.prepare(metadata, "s/a"), metadata)
    resealed = ops.Seal.prepare(metadata, "s/a")
    assert isinstance(resealed, ops.AlreadyDone) and resealed.value() == 6
    with pytest.raises(SegmentSealedError):
        ops.Append.prepare(metadata, "s/a", b"x", None, (), 1)


def test_a_merge_waits_for_its_source_to_be_in_long_term_storage():
    metadata = _metadata_with("s/target")
    ops.Create.prepare(metadata, "s/source", {}).accept(metadata)
    with pytest.raises(StoreError, match="not sealed"):
        ops.Merge.prepare(metadata, "s/target", "s/source")
    _accept(ops.Append.prepare(metadata, "s/source", b"abc", None, (), 1), metadata)
    _accept(ops.Seal.prepare(metadata, "s/source"), metadata)
    verdict = ops.Merge.prepare(metadata, "s/target", "s/source")
    assert verdict == ops.FlushFirst(metadata.segment("s/source").segment_id)


def test_storage_flushed_is_refused_for_a_segment_truncated_past_the_chunk():
    metadata = _metadata_with("s/a")
    seg = metadata.segment("s/a")
    _accept(ops.Append.prepare(metadata, "s/a", b"abcdef", None, (), 1), metadata)
    _accept(ops.Truncate.prepare(metadata, "s/a", 4), metadata)
    with pytest.raises(SegmentTruncatedError):
        ops.StorageFlushed.prepare(metadata, seg.segment_id, 0, 4, "chunk")
    assert ops.StorageFlushed.prepare(metadata, seg.segment_id, 0, 5, "chunk").length == 5


class _Signals:
    def __init__(self) -> None:
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def notice_dirty(self, cached_bytes: int) -> None:
        pass

    def delete_chunks(self, names: Sequence[str]) -> None:
        pass


def _fresh_state() -> tuple[ContainerMetadata, MemoryState, _Signals]:
    metadata = ContainerMetadata()
    signals = _Signals()
    return metadata, MemoryState(metadata, ReadIndex(1 << 20), RateRegistry(), CheckpointPolicy(1 << 20), signals), signals


def test_apply_makes_operations_durable_and_records_checkpoints_that_open_their_entry():
    metadata, state, signals = _fresh_state()
    create = _accept(ops.Create.prepare(metadata, "s/a", {}), metadata)
    assert "s/a" not in metadata.visible  # accepted, not yet durable
    create.apply(state, LogAddress(1))
    append = _accept(ops.Append.prepare(metadata, "s/a", b"abc", None, (), 4), metadata)
    assert append.apply(state, None) == 0
    seg = metadata.visible_segment("s/a")
    assert (seg.durable_length, state.read_index.read(seg.segment_id, 0, 3)[0]) == (3, b"abc")
    assert len(state.rates) == 1  # a live append is load
    seal = _accept(ops.Seal.prepare(metadata, "s/a"), metadata)
    assert seal.apply(state, None) == 3 and signals.wakes == 1
    checkpoint = ops.Checkpoint.prepare(metadata, 0)
    checkpoint.apply(state, None)  # inside an entry: the log cannot be truncated before it
    checkpoint.apply(state, LogAddress(5))
    assert len(state.checkpoints) == 1


def test_a_replayed_append_is_not_counted_as_load():
    metadata, state, _ = _fresh_state()
    _accept(ops.Create.prepare(metadata, "s/a", {}), metadata).apply(state, None)
    replayed = ops.decode(ops.Append.prepare(metadata, "s/a", b"abc", None, (), 4).encode())
    replayed.accept(metadata)
    assert replayed.apply(state, None) == 0
    assert metadata.visible_segment("s/a").durable_length == 3
    assert len(state.rates) == 0
