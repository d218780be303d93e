from __future__ import annotations

import pytest

from millrace.store.controller import Controller
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness, make_harness


@pytest.fixture
def harness(request, tmp_path) -> StoreHarness:
    return make_harness(request, tmp_path)


@pytest.fixture
def controller(harness: StoreHarness) -> Controller:
    return Controller(harness.store, TableStore(harness.store))
