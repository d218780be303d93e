"""TopicRegistry.refresh as two cluster nodes use it: two registries, each with its own TableStore,
over one segment store. A node sees the other's topic changes at its next refresh, and a refresh
with nothing new does not read the records again (a node refreshes every second)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.store.controller import Controller, StreamConfiguration
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


def test_two_nodes_carving_a_native_stream_keep_both_carves(store: SegmentStore) -> None:
    """Two nodes scale a native stream at once, one with a copy of its record from before the other's
    carve: the second carve is made on the stored record (a conditional replace), so neither boundary
    is lost and no successor could start inside a live partition."""
    first = TopicRegistry(Controller(store, TableStore(store)), TableStore(store), "kafka")
    second = TopicRegistry(Controller(store, TableStore(store)), TableStore(store), "kafka")
    first.controller.create_scope("iot")
    first.controller.create_stream("iot", "s", StreamConfiguration(initial_segments=1))
    first.adopt_stream("iot", "s")
    second.refresh()
    grown: list[int] = []
    second.listeners.append(lambda event, topic: grown.append(topic.partition_count) if event == "grown" else None)

    first.carve("iot/s", [0.3])
    carved = second.carve("iot/s", [0.7])  # its copy still has the one partition [0, 1)
    assert carved.slices == ((0.0, 1.0), (0.0, 0.3), (0.3, 1.0), (0.3, 0.7), (0.7, 1.0))
    assert carved.retired == {0, 2}
    first.refresh()
    assert first.record("iot/s") == second.record("iot/s") == carved
    assert grown == [5]
