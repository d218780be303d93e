"""Property test: a table behaves like a dict of key -> (value, version) under any sequence of
batches, conditional updates, removals, iterations, compactions and restarts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from millrace.store.errors import TableKeyNotFoundError, TableKeyVersionMismatchError
from millrace.store.tables import NOT_EXISTS, TableConfig, TableStore
from tests.tables.harness import StoreHarness

TABLE = "model/_tables/t"
KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f/1", b"f/2"])
VALUES = st.binary(max_size=64)
# How an update names its expectation: none, "absent", the current version, or a stale one.
CONDITIONS = st.sampled_from(["none", "absent", "current", "stale"])
CONFIG = TableConfig(compaction_min_bytes=512, compaction_max_prefix_bytes=300)


class TableModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tablemodel-"))
        self.harness = StoreHarness(self.dir)
        self.tables = TableStore(self.harness.store, CONFIG)
        self.tables.create_table(TABLE)
        self.model: dict[bytes, tuple[bytes, int]] = {}
        self.highest = -1

    def teardown(self) -> None:
        self.harness.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _expected(self, key: bytes, condition: str):
        current = self.model.get(key)
        if condition == "none":
            return None, None
        if condition == "absent":
            return NOT_EXISTS, (TableKeyVersionMismatchError if current else None)
        if current is None:
            # Any version is stale for an absent key.
            return self.highest + 1, TableKeyNotFoundError
        if condition == "current":
            return current[1], None
        return current[1] + 1, TableKeyVersionMismatchError

    @rule(batch=st.dictionaries(KEYS, st.tuples(VALUES, CONDITIONS), min_size=1, max_size=4))
    def put(self, batch) -> None:
        entries, failure = [], None
        for key, (value, condition) in batch.items():
            expected, error = self._expected(key, condition)
            failure = failure or error
            entries.append((key, value, expected))
        if failure is not None:
            with pytest.raises(failure):
                self.tables.put(TABLE, entries)
            return
        versions = self.tables.put(TABLE, entries)
        assert len(set(versions)) == len(versions)
        assert min(versions) > self.highest
        self.highest = max(versions)
        for (key, value, _), version in zip(entries, versions, strict=True):
            self.model[key] = (value, version)

    @rule(batch=st.dictionaries(KEYS, st.sampled_from(["none", "current", "stale"]), min_size=1, max_size=3))
    def remove(self, batch) -> None:
        items, failure = [], None
        for key, condition in batch.items():
            expected, error = self._expected(key, condition)
            failure = failure or error
            items.append((key, expected))
        if failure is not None:
            with pytest.raises(failure):
                self.tables.remove(TABLE, items)
            return
        self.tables.remove(TABLE, items)
        for key, _ in items:
            self.model.pop(key, None)

    @rule(keys=st.lists(KEYS, max_size=4))
    def get(self, keys) -> None:
        got = self.tables.get(TABLE, keys)
        for key, entry in zip(keys, got, strict=True):
            want = self.model.get(key)
            assert (None if entry is None else (entry.value, entry.version)) == want

    @rule(limit=st.integers(1, 4), prefix=st.sampled_from([b"", b"f/", b"a"]))
    def iterate(self, limit: int, prefix: bytes) -> None:
        seen, token = [], None
        while True:
            page = self.tables.iterate_entries(TABLE, token, limit=limit, prefix=prefix)
            seen.extend((e.key, (e.value, e.version)) for e in page.items)
            if page.continuation is None:
                break
            token = page.continuation
        assert seen == sorted((k, v) for k, v in self.model.items() if k.startswith(prefix))

    @rule()
    def compact(self) -> None:
        self.tables.compact(TABLE)

    @precondition(lambda self: True)
    @rule()
    def restart(self) -> None:
        self.tables = TableStore(self.harness.restart(), CONFIG)

    @invariant()
    def key_count(self) -> None:
        assert self.tables.get_info(TABLE).key_count == len(self.model)


TableModel.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_table_against_dict_model = pytest.mark.slow(TableModel.TestCase)  # tens of seconds on two cores
