"""Reading: batch reads between two stream cuts, and streaming reads whose offsets are stream cuts.

Both plan the same way, through the batch client: the segment ranges between two cuts
(``BatchClient.list_segments``), one Spark input partition per range, each read by a task on its own
connection (``BatchClient.read_segment``). A stream cut names segments of any epoch, so a range plan
between two cuts covers whatever splits and merges happened between them: new segments simply become
new partitions. A streaming offset is a JSON object of base64 cuts, ``{"scope/stream": cut}``, which
Spark writes to its checkpoint before the micro-batch runs; a restarted query plans the same ranges
again from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from millrace import BatchClient, BytesSerializer, SegmentRange, StreamCut, StreamManager
from millrace.spark.options import Connection, MillraceOptionError, SourceOptions, split_stream

SCHEMA = StructType([
    StructField("routing_key", StringType()),  # null for an event written without one
    StructField("event", BinaryType(), nullable=False),
    StructField("stream", StringType(), nullable=False),  # scope/stream
    StructField("segment_id", LongType(), nullable=False),
    StructField("segment_offset", LongType(), nullable=False),  # of the batch holding the event
    StructField("event_index", IntegerType(), nullable=False),  # within that batch
    StructField("timestamp", TimestampType(), nullable=False),
])

SCALE_WAIT_S = 0.05  # between looks at a stream whose scale is under way


class SegmentRangePartition(InputPartition):
    """One Spark input partition: one segment range, read by one task."""

    def __init__(self, segment_range: SegmentRange) -> None:
        super().__init__(segment_range)
        self.segment_range = segment_range


def plan(sm: StreamManager, scope: str, stream: str, start: StreamCut | None,
         end: StreamCut | None) -> list[InputPartition]:
    """One partition per segment range between the cuts (oldest epoch first)."""
    ranges = BatchClient(sm).list_segments(scope, stream, from_cut=start, to_cut=end)
    return [SegmentRangePartition(r) for r in ranges]


def read_range(conn: Connection, partition: InputPartition | None) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition; None is Spark's stand-in when a plan has no partition at all."""
    if partition is None:
        return
    if not isinstance(partition, SegmentRangePartition):
        raise TypeError(f"not a millrace input partition: {partition!r}")
    r = partition.segment_range
    qualified = f"{r.scope}/{r.stream}"
    with conn.manager() as sm:
        for e in BatchClient(sm).read_segment(r, BytesSerializer()):
            yield (e.routing_key, e.data, qualified, e.segment_id, e.position, e.index,
                   datetime.fromtimestamp(e.timestamp_ms / 1000, tz=UTC))


def settled_tail(sm: StreamManager, scope: str, stream: str) -> StreamCut:
    """The stream's tail (its current segments at their durable lengths), taken once no scale is under
    way: mid-scale, writers already write to successors the history does not show yet."""
    described = sm.describe_stream(scope, stream)
    deadline = time.monotonic() + sm.controller.timeout
    while described.state == "scaling" and time.monotonic() < deadline:
        time.sleep(SCALE_WAIT_S)
        described = sm.describe_stream(scope, stream)
    return StreamCut(scope, stream, {s.segment.segment_id: s.length or 0 for s in described.segments})


class MillraceBatchReader(DataSourceReader):
    """``spark.read.format("millrace")``: each stream between its ``start_cut`` (default: its head) and
    its ``end_cut`` (default: its tail when the query is planned)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        found: list[InputPartition] = []
        with self.options.connection.manager() as sm:
            for scope, stream in self.options.streams:
                name = f"{scope}/{stream}"
                end = self.options.end_cuts.get(name) or settled_tail(sm, scope, stream)
                found.extend(plan(sm, scope, stream, self.options.start_cuts.get(name), end))
        return found

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_range(self.options.connection, partition)


class MillraceStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("millrace")``: offsets are ``{"scope/stream": base64 StreamCut}``; a
    micro-batch reads the segment ranges between its start and end cuts. The first starts at
    ``start_cut`` (default: the head); a restarted query starts at the offset in its checkpoint."""

    def __init__(self, options: SourceOptions) -> None:
        if options.end_cuts:
            raise MillraceOptionError("option end_cut is for batch reads: a streaming read follows the tail")
        self.options = options
        self._manager: StreamManager | None = None  # opened on first use: this object is pickled first

    def _sm(self) -> StreamManager:
        if self._manager is None:
            self._manager = self.options.connection.manager()
        return self._manager

    def initialOffset(self) -> dict[str, str]:
        sm = self._sm()
        return {f"{sc}/{st}": (self.options.start_cuts.get(f"{sc}/{st}") or sm.head_cut(sc, st)).to_base64()
                for sc, st in self.options.streams}

    def latestOffset(self) -> dict[str, str]:
        sm = self._sm()
        return {f"{sc}/{st}": settled_tail(sm, sc, st).to_base64() for sc, st in self.options.streams}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        starts, ends = offset_cuts(start), offset_cuts(end)
        found: list[InputPartition] = []
        for name, end_cut in ends.items():
            start_cut = starts.get(name)
            if start_cut == end_cut:
                continue
            scope, stream = split_stream(name)
            found.extend(plan(self._sm(), scope, stream, start_cut, end_cut))
        return found

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_range(self.options.connection, partition)

    def stop(self) -> None:
        if self._manager is not None:
            self._manager.close()
            self._manager = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_manager": None}  # a connection pool does not travel to tasks


def offset_cuts(offset: Mapping[str, str]) -> dict[str, StreamCut]:
    """A streaming offset's cuts by stream; ValueError for an offset this source did not write."""
    cuts: dict[str, StreamCut] = {}
    for name, text in offset.items():
        cut = StreamCut.from_base64(text)
        if f"{cut.scope}/{cut.stream}" != name:
            raise ValueError(f"offset entry {name!r} holds a cut of {cut.scope}/{cut.stream}")
        cuts[name] = cut
    return cuts
