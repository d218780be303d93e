"""Property-based test: the segment store behaves like a simple in-memory model of segments,
across random appends, reads, truncations, seals, merges, deletions and restarts."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from millrace.store.errors import SegmentSealedError, SegmentTruncatedError
from tests.storehelpers import open_store


class Model:
    def __init__(self) -> None:
        self.data = bytearray()
        self.start = 0
        self.sealed = False


class StoreMachine(RuleBasedStateMachine):
    segments = Bundle("segments")

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="millrace-model-")
        # Tiny thresholds: flushes, evictions, chunk reads and log truncation happen within a few steps.
        self.store = open_store(self.root, containers=2, cache_max_bytes=2048, flush_threshold_bytes=512,
                                max_chunk_bytes=1024, checkpoint_every_bytes=4096)
        self.model: dict[str, Model] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(target=segments)
    def create(self) -> str:
        self.counter += 1
        name = f"scope/stream/{self.counter}.#epoch.0"
        self.store.create_segment(name).result(10)
        self.model[name] = Model()
        return name

    @rule(name=segments, data=st.binary(min_size=1, max_size=700))
    def append(self, name: str, data: bytes) -> None:
        m = self.model.get(name)
        if m is None:
            return
        fut = self.store.append(name, data)
        if m.sealed:
            try:
                fut.result(10)
                raise AssertionError("append to a sealed segment succeeded")
            except SegmentSealedError:
                return
        assert fut.result(10) == len(m.data)
        m.data += data

    @rule(name=segments, frac=st.floats(0, 1), length=st.integers(1, 3000))
    def read(self, name: str, frac: float, length: int) -> None:
        m = self.model.get(name)
        if m is None:
            return
        offset = m.start + int(frac * (len(m.data) - m.start))
        got = bytearray()
        while len(got) < length and offset + len(got) < len(m.data):
            chunk = self.store.read(name, offset + len(got), length - len(got)).result(10).data
            assert chunk, "empty read inside the segment"
            got += chunk
        assert bytes(got) == bytes(m.data[offset : offset + length])
        if m.start > 0:
            try:
                self.store.read(name, m.start - 1, 1).result(10)
                raise AssertionError("read below the start offset succeeded")
            except SegmentTruncatedError:
                pass

    @rule(name=segments, frac=st.floats(0, 1))
    def truncate(self, name: str, frac: float) -> None:
        m = self.model.get(name)
        if m is None:
            return
        offset = m.start + int(frac * (len(m.data) - m.start))
        self.store.truncate(name, offset).result(10)
        m.start = max(m.start, offset)

    @rule(name=segments)
    def seal(self, name: str) -> None:
        m = self.model.get(name)
        if m is None:
            return
        assert self.store.seal(name).result(10) == len(m.data)
        m.sealed = True

    @rule(target=segments, parent=segments, data=st.binary(min_size=0, max_size=900))
    def merge_transaction(self, parent: str, data: bytes) -> str:
        m = self.model.get(parent)
        if m is None or m.sealed:
            return parent
        self.counter += 1
        txn = f"{parent}#transaction.{self.counter}"
        self.store.create_segment(txn).result(10)
        if data:
            self.store.append(txn, data).result(10)
        self.store.seal(txn).result(10)
        assert self.store.merge(parent, txn).result(20) == len(m.data)
        m.data += data
        assert not self.store.exists(txn)
        return parent

    @rule(name=consumes(segments))
    def delete(self, name: str) -> None:
        if self.model.pop(name, None) is not None:
            self.store.delete(name).result(10)
            assert not self.store.exists(name)

    @precondition(lambda self: self.model)
    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = open_store(self.root, containers=2, cache_max_bytes=2048, flush_threshold_bytes=512,
                                max_chunk_bytes=1024, checkpoint_every_bytes=4096)

    @invariant()
    def infos_match(self) -> None:
        for name, m in self.model.items():
            info = self.store.get_info(name)
            assert (info.length, info.start_offset, info.sealed) == (len(m.data), m.start, m.sealed)
        assert sorted(self.store.list_segments()) == sorted(self.model)


StoreMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStoreModel = pytest.mark.slow(StoreMachine.TestCase)  # tens of seconds on two cores
