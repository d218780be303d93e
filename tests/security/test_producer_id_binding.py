"""Producer ids carry a tag of what they were issued to (``streams/producer_ids.py``): a principal's
idempotent id, or a transactional id's (a native writer's) coordinated one. Any node checks a batch's id
against the principal or transactional id it came with, with no state per producer and no call to the
transaction coordinator; a restart (a second allocator on the same table) checks alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace.store.tables import TableStore
from millrace.streams.producer_ids import COORDINATED_SPACE, ProducerIdAllocator
from tests.tables.harness import StoreHarness, make_harness


@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> StoreHarness:
    return make_harness(request, tmp_path)


def test_ids_are_bound_to_what_they_were_issued_to(harness: StoreHarness) -> None:
    tables = TableStore(harness.store)
    ids = ProducerIdAllocator(tables)
    alice = [ids.allocate_for("User:alice") for _ in range(50)]
    ledger = [ids.allocate("ledger") for _ in range(50)]
    assert len(set(alice + ledger)) == 100
    assert all(0 <= pid < COORDINATED_SPACE for pid in alice) and all(pid >= COORDINATED_SPACE for pid in ledger)
    assert all(ids.owns("User:alice", pid) for pid in alice)
    # Another principal's check fails but for the rare tag collision (1 in 2**24 an id).
    assert sum(ids.owns("User:mallory", pid) for pid in alice) <= 1
    assert not any(ids.owns("User:alice", pid) for pid in ledger)  # a coordinated id is nobody's own
    assert all(ids.issued_for_transaction("ledger", pid) for pid in ledger)
    assert sum(ids.issued_for_transaction("payroll", pid) for pid in ledger) <= 1
    assert not any(ids.issued_for_transaction("ledger", pid) for pid in alice)
    # Another node, or the same after a restart, reads the same key and checks alike.
    again = ProducerIdAllocator(tables)
    assert all(again.owns("User:alice", pid) for pid in alice)
    assert all(again.issued_for_transaction("ledger", pid) for pid in ledger)
    assert again.allocate_for("User:alice") not in alice  # and never hands out an id twice
