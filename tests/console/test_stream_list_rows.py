"""The stream list's rows without a server (``gateway/http/console/stream_list.py``): a fake node view with
segments, rates and read counters; sizes after truncation with sealed predecessors, open segments, kinds
from formats, rates out between passes (a restarted container's counter counts from zero), the cap on kept
rows, and the server-side sort, cut and validation."""

from __future__ import annotations

from typing import Any

import pytest

from millrace.gateway.http.console import stream_list
from millrace.gateway.http.console.stream_list import StreamList, owner_of_segment
from millrace.protocol.contracts import FORMAT_ATTRIBUTE, SegmentFormat, SegmentInfo
from millrace.store.containers.rates import SegmentRates
from millrace.store.controller import (
    RetentionPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamInfo,
    StreamState,
    segment_id,
    segment_name,
)
from millrace.store.errors import SegmentNotFoundError


class FakeContainer:
    def __init__(self) -> None:
        self.read: dict[str, int] = {}

    def read_bytes_by_segment(self) -> dict[str, int]:
        return dict(self.read)


class FakeNode:
    """Segments by name with (start, length, sealed, attributes), each open one's bytes/s in."""

    def __init__(self) -> None:
        self.infos: dict[str, SegmentInfo] = {}
        self.rates: dict[str, float] = {}
        self.container = FakeContainer()

    @property
    def containers(self) -> list[Any]:
        return [self.container]

    def add(self, name: str, start: int, length: int, sealed: bool = False, rate: float = 0.0,
            attributes: dict[str, int] | None = None) -> None:
        self.infos[name] = SegmentInfo(name, start, length, sealed, length, attributes or {})
        self.rates[name] = rate

    def list_segments(self) -> list[str]:
        return sorted(self.infos)

    def get_info(self, name: str) -> SegmentInfo:
        try:
            return self.infos[name]
        except KeyError:
            raise SegmentNotFoundError(name) from None

    def segment_rates(self, name: str) -> SegmentRates:
        if name not in self.rates:
            raise SegmentNotFoundError(name)
        r = self.rates[name]
        return SegmentRates((2.0,), (r / 100,), (r,), 10.0)


def stream(scope: str, name: str, segments: list[int], retention: RetentionPolicy | None = None,
           state: StreamState = StreamState.ACTIVE) -> tuple[StreamInfo, list[SegmentRange]]:
    config = StreamConfiguration(retention=retention or RetentionPolicy())
    info = StreamInfo(scope, name, state, config, 0, 1, {}, 0)
    width = 1 / len(segments)
    return info, [SegmentRange(scope, name, sid, i * width, (i + 1) * width) for i, sid in enumerate(segments)]


def test_sizes_segments_kinds_and_rates_out_between_passes() -> None:
    node = FakeNode()
    old, left, right = segment_id(0, 0), segment_id(1, 1), segment_id(2, 1)
    node.add(segment_name("s", "split", old), 100, 1000, sealed=True)  # a sealed predecessor still held
    node.add(segment_name("s", "split", left), 0, 300, rate=50.0)
    node.add(segment_name("s", "split", right), 20, 220, rate=25.0)
    node.add(segment_name("s", "bytes", old), 0, 77, rate=1.0, attributes={FORMAT_ATTRIBUTE: SegmentFormat.BYTES})
    node.add(segment_name("s", "sync", old), 0, 5, attributes={FORMAT_ATTRIBUTE: SegmentFormat.SYNCHRONIZER})
    node.add(segment_name("s", "done", old), 0, 9, sealed=True)
    node.add("s/split/0.#epoch.0#kafka-index", 0, 5000)  # internal: never a stream's
    walk = [stream("s", "split", [left, right], RetentionPolicy.by_time(60_000)), stream("s", "bytes", [old]),
            stream("s", "sync", [old]), stream("s", "done", [old], state=StreamState.SEALED)]
    listed = StreamList(None, "kafka")
    first = listed.measure(walk, node)  # type: ignore[arg-type]  # the fake offers what measure reads
    rows = {r.stream: r for r in first.rows}
    split = rows["split"]
    assert (split.kind, split.open_segments, split.size_bytes) == ("unformatted", 2, 900 + 300 + 200)
    assert split.bytes_in_per_s == 75.0 and split.events_in_per_s == 0.75
    assert split.retention == {"policy": "time", "ms": 60_000, "bytes": None}
    assert split.bytes_out_per_s is None  # no earlier counters
    assert (rows["bytes"].kind, rows["bytes"].size_bytes) == ("byte-stream", 77)
    assert rows["sync"].kind == "synchronizer"
    assert (rows["done"].state, rows["done"].open_segments, rows["done"].bytes_in_per_s) == ("sealed", 0, 0.0)
    assert set(first.segment_rates["s/split"]) == {left, right}
    assert first.rate_window_s == 2.0

    node.container.read = {segment_name("s", "split", left): 4000, "s/split/0.#epoch.0#kafka-index": 999}
    listed.measure(walk, node)  # type: ignore[arg-type]
    node.container.read = {segment_name("s", "split", left): 100}  # its container restarted: from zero
    third = {r.stream: r for r in listed.measure(walk, node).rows}  # type: ignore[arg-type]
    assert third["split"].bytes_out_per_s is not None and third["split"].bytes_out_per_s > 0
    assert third["bytes"].bytes_out_per_s == 0.0


def test_owner_of_segment_names_streams_and_tables_only() -> None:
    assert owner_of_segment("sc/st/3.#epoch.2") == ("sc", "st", False)
    assert owner_of_segment("sc/inventory#kvtable/2") == ("sc", "inventory", True)
    for internal in ("sc/st/3.#epoch.2#kafka-index", "_system/_tables/kafka_topics", "raw", "sc/t#kvtable/x"):
        assert owner_of_segment(internal) is None, internal


def rows_of(count: int) -> list[tuple[StreamInfo, list[SegmentRange]]]:
    return [stream("many", f"s{i:03}", [segment_id(0, 0)]) for i in range(count)]


def test_kept_rows_are_capped_busiest_first_and_answers_sort_and_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    node = FakeNode()
    for i in range(30):
        node.add(segment_name("many", f"s{i:03}", segment_id(0, 0)), 0, 10 * (i % 7), rate=float(i))
    monkeypatch.setattr(stream_list, "MAX_STREAMS_KEPT", 20)
    listed = StreamList(None, "kafka")
    listed.install(listed.measure(rows_of(30), node))  # type: ignore[arg-type]
    busiest = listed.answer(limit=1000)
    assert (busiest["total"], busiest["kept"], len(busiest["streams"])) == (30, 20, 20)
    assert [r["stream"] for r in busiest["streams"]] == [f"s{i:03}" for i in range(29, 9, -1)]
    by_size = listed.answer("size_bytes", descending=False, limit=5)["streams"]
    assert [(r["size_bytes"], r["stream"]) for r in by_size] == sorted((r["size_bytes"], r["stream"])
                                                                     for r in busiest["streams"])[:5]
    assert listed.answer("size_bytes", descending=False, limit=5)["streams"] == by_size  # the cached order
    assert [r["stream"] for r in listed.top(3)] == ["s029", "s028", "s027"]
    with pytest.raises(ValueError, match="sort must be one of"):
        listed.answer("colour")
    with pytest.raises(ValueError, match="limit must be"):
        listed.answer(limit=stream_list.MAX_ROWS_ANSWERED + 1)
    assert StreamList(None, "kafka").answer()["streams"] == []  # before the first pass
