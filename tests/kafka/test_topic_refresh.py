"""TopicRegistry.refresh as two cluster nodes use it: two registries, each with its own TableStore,
over one segment store. A node sees the other's topic changes at its next refresh, and a refresh
with nothing new does not read the records again (a node refreshes every second)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.store.controller import Controller
from millrace.store.segment_store import SegmentStore
from millrace.store.tables.table_store import TableStore
from millrace.streams.topics import TOPICS_TABLE, TopicRegistry
from tests.storehelpers import open_store


class _CountingTables(TableStore):
    """A TableStore that counts full reads of the topics table."""

    full_reads = 0

    def entries(self, table: str, prefix: bytes = b"") -> Iterator:  # type: ignore[override]
        if table == TOPICS_TABLE:
            self.full_reads += 1
        return super().entries(table, prefix)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SegmentStore]:
    opened = open_store(str(tmp_path))
    yield opened
    opened.close()


def test_a_refresh_reads_the_records_only_when_the_table_moved(store: SegmentStore) -> None:
    controller_node = TopicRegistry(Controller(store, TableStore(store)), TableStore(store), "kafka")
    tables = _CountingTables(store)
    other_node = TopicRegistry(Controller(store, tables), tables, "kafka")
    seen: list[tuple[str, str, int]] = []
    other_node.listeners.append(lambda event, topic: seen.append((event, topic.name, topic.partition_count)))

    controller_node.create("orders", 2)
    other_node.refresh()
    assert other_node.record("orders") is not None and seen == [("created", "orders", 2)]
    reads = tables.full_reads
    other_node.refresh()
    other_node.refresh()
    assert tables.full_reads == reads  # nothing moved: no record read again

    controller_node.add_partitions("orders", 3)
    other_node.refresh()
    assert seen[-1] == ("grown", "orders", 3) and tables.full_reads == reads + 1
    controller_node.delete("orders")
    other_node.refresh()
    assert other_node.record("orders") is None


def test_topics_are_found_by_id_through_every_change_and_on_every_node(store: SegmentStore) -> None:
    controller_node = TopicRegistry(Controller(store, TableStore(store)), TableStore(store), "kafka")
    created = controller_node.create("orders", 2)
    assert controller_node.by_id(created.topic_id) is controller_node.get("orders")
    grown = controller_node.add_partitions("orders", 3)
    assert controller_node.by_id(created.topic_id) is grown and grown.partition_count == 3
    other_node = TopicRegistry(Controller(store, TableStore(store)), TableStore(store), "kafka")
    assert other_node.by_id(created.topic_id) == grown  # read from the table when the registry opens
    controller_node.delete("orders")
    other_node.refresh()
    assert controller_node.by_id(created.topic_id) is None and other_node.by_id(created.topic_id) is None
