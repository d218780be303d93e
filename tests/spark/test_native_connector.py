"""format("millrace"), the native Spark connector, against a real server and local[2] Spark: batch reads
between stream cuts (a partition per segment range), the transactional sink exactly once per batch id
(also when a crash interrupted a commit), and a streaming query that follows a split and a merge, is
stopped, loses its last commit record as in a crash, and restarts from its checkpoint with every input
in its sink exactly once. Each stream holds a few dozen events: Spark, not the data, is the cost here."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace import StreamCut, StreamManager, TxnStatus
from tests.server_process import ServerProcess
from tests.spark.conftest import pyspark_missing

if pyspark_missing():
    pytest.skip(str(pyspark_missing()), allow_module_level=True)

from millrace.spark import MillraceDataSource, MillraceOptionError  # noqa: E402 (needs pyspark)
from millrace.spark.options import sink_options  # noqa: E402
from millrace.spark.sink import COMMITTING, BatchCommitter, BatchRecord  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = [f"sensor-{i}" for i in range(5)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("millrace"))) as running:
        yield running


@pytest.fixture(scope="module")
def endpoint(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.native_port}"


@pytest.fixture
def sm(endpoint: str) -> Iterator[StreamManager]:
    with StreamManager(endpoint) as manager:
        yield manager


@pytest.fixture
def millrace_spark(spark: Any) -> Any:
    spark.dataSource.register(MillraceDataSource)
    return spark


def new_stream(sm: StreamManager, segments: int = 1) -> tuple[str, str]:
    scope, stream = "sparktest", f"s-{uuid.uuid4().hex[:8]}"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=segments)
    return scope, stream


def write(sm: StreamManager, scope: str, stream: str, first: int, count: int) -> list[tuple[str, bytes]]:
    """Events ``first`` .. ``first + count - 1`` (unique payloads), durable on return."""
    written = [(KEYS[n % len(KEYS)], f"event-{n}".encode()) for n in range(first, first + count)]
    with sm.create_writer(scope, stream) as writer:
        for key, event in written:
            writer.write_event(event, routing_key=key)
    return written


def stored(sm: StreamManager, scope: str, stream: str) -> Counter[tuple[str | None, bytes]]:
    """Everything the stream holds, read back with the batch client: (routing key, event) -> copies."""
    batch = sm.create_batch_client()
    return Counter((e.routing_key, e.data) for r in batch.list_segments(scope, stream) for e in batch.read_segment(r))


def test_batch_read_between_two_cuts_has_a_partition_per_segment_range(millrace_spark: Any, sm: StreamManager,
                                                                         endpoint: str) -> None:
    scope, stream = new_stream(sm, segments=2)
    before = write(sm, scope, stream, 0, 20)
    start = sm.tail_cut(scope, stream)
    # A split between the cuts: the read spans two epochs (the split segment's successors are read from
    # their beginning; the split one holds nothing after the start cut).
    split = sm.describe_stream(scope, stream).segments[0].segment
    sm.split_segment(scope, stream, split)
    between = write(sm, scope, stream, 20, 30)
    end = sm.tail_cut(scope, stream)
    after = write(sm, scope, stream, 50, 10)

    def reader() -> Any:  # a new one each time: a DataFrameReader's option() changes it in place
        return millrace_spark.read.format("millrace").option("endpoint", endpoint).option("stream", f"{scope}/{stream}")

    ranged = reader().option("start_cut", start.to_base64()).option("end_cut", end.to_base64()).load()
    ranges = sm.create_batch_client().list_segments(scope, stream, start, end)
    assert ranged.rdd.getNumPartitions() == len(ranges), ranges
    rows = ranged.collect()
    assert Counter((r.routing_key, bytes(r.event)) for r in rows) == Counter(between)
    assert {r.stream for r in rows} == {f"{scope}/{stream}"}
    assert {r.segment_id for r in rows} == {r.segment_id for r in ranges}
    assert any(r.segment_id >> 32 == 1 for r in ranges), ranges  # the successors are partitions of their own
    # Per key, a segment's events come in the order they were written (segment order within a range).
    for key in KEYS:
        for sid in {r.segment_id for r in rows}:
            offsets = [(r.segment_offset, r.event_index) for r in rows if r.routing_key == key and r.segment_id == sid]
            assert offsets == sorted(offsets)

    # Without cuts: from the head to the tail as it is when the query is planned.
    everything = reader().load().collect()
    assert Counter((r.routing_key, bytes(r.event)) for r in everything) == Counter(before + between + after)


def test_options_are_checked_before_anything_runs(millrace_spark: Any, sm: StreamManager, endpoint: str) -> None:
    scope, stream = new_stream(sm)
    other_scope, other = new_stream(sm)
    stranger = sm.head_cut(other_scope, other).to_base64()
    with pytest.raises(Exception, match="option start_cut: a cut of"):
        (millrace_spark.read.format("millrace").option("endpoint", endpoint).option("stream", f"{scope}/{stream}")
         .option("start_cut", stranger).load().collect())
    with pytest.raises(MillraceOptionError, match="sink_id is required"):
        sink_options({"endpoint": endpoint, "stream": f"{scope}/{stream}"}, streaming=True)
    with pytest.raises(Exception, match="writes rows with an 'event' column"):
        (millrace_spark.createDataFrame([("k", b"v")], "routing_key STRING, value BINARY").write.format("millrace")
         .mode("append").option("endpoint", endpoint).option("stream", f"{scope}/{stream}").save())
    assert sm.create_batch_client().list_segments(scope, stream) == []  # nothing was written


def test_batch_sink_rerun_of_a_batch_id_adds_nothing(millrace_spark: Any, sm: StreamManager, endpoint: str) -> None:
    scope, stream = new_stream(sm, segments=2)
    sink_id = f"sink-{uuid.uuid4().hex[:6]}"
    first = [(KEYS[n % 5], f"first-{n}".encode()) for n in range(40)]
    second = [(KEYS[n % 5], f"second-{n}".encode()) for n in range(10)]

    def save(rows: list[tuple[str, bytes]], batch_id: int) -> None:
        df = millrace_spark.createDataFrame(rows, "routing_key STRING, event BINARY").repartition(2)
        (df.write.format("millrace").mode("append").option("endpoint", endpoint).option("stream", f"{scope}/{stream}")
         .option("sink_id", sink_id).option("batch_id", str(batch_id)).save())

    save(first, 7)
    assert stored(sm, scope, stream) == Counter(first)
    save(first, 7)  # the same batch again, as after a crash before the job knew it had committed
    save(first, 3)  # an older batch id: also already behind the sink
    assert stored(sm, scope, stream) == Counter(first)
    save(second, 8)
    assert stored(sm, scope, stream) == Counter(first + second)


def test_a_commit_interrupted_by_a_crash_lands_once(sm: StreamManager, endpoint: str) -> None:
    """The driver recorded batch 5 as committing, committed one of its two transactions and died. The rerun
    of batch 5 (new transactions with the same rows) finishes the recorded ones and aborts its own."""
    scope, stream = new_stream(sm)
    options = sink_options({"endpoint": endpoint, "stream": f"{scope}/{stream}", "sink_id": "crashed"},
                           streaming=True)
    committer = BatchCommitter(sm, options)
    rows = [(KEYS[n % 5], f"row-{n}".encode()) for n in range(12)]

    def transactions() -> list[str]:
        ids = []
        for part in (rows[:6], rows[6:]):
            txn = committer.txw.begin_txn()
            for key, event in part:
                txn.write_event(event, routing_key=key)
            txn.flush()
            ids.append(str(txn.txn_id))
        return ids

    crashed = transactions()
    committer.table.put_if_absent("crashed", BatchRecord(5, tuple(crashed), COMMITTING).to_bytes())
    committer.txw.get_txn(crashed[0]).commit()
    rerun = transactions()
    assert committer.commit(rerun, 5) is False
    assert stored(sm, scope, stream) == Counter(rows)
    assert [committer.txw.txn_status(t) for t in crashed] == [TxnStatus.COMMITTED] * 2
    assert [committer.txw.txn_status(t) for t in rerun] == [TxnStatus.ABORTED] * 2
    assert committer.commit(transactions(), 5) is False  # and again: nothing more
    assert stored(sm, scope, stream) == Counter(rows)


def test_streaming_follows_a_split_and_a_merge_and_restarts_exactly_once(
        millrace_spark: Any, sm: StreamManager, endpoint: str, tmp_path: Path) -> None:
    scope, source = new_stream(sm)
    _, sink = new_stream(sm)
    checkpoint = str(tmp_path / "checkpoint")
    sink_id = f"stream-{uuid.uuid4().hex[:6]}"

    def start() -> Any:
        events = (millrace_spark.readStream.format("millrace").option("endpoint", endpoint)
                  .option("stream", f"{scope}/{source}").load())
        return (events.select("routing_key", "event").writeStream.format("millrace")
                .option("endpoint", endpoint).option("stream", f"{scope}/{sink}").option("sink_id", sink_id)
                .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())

    written = write(sm, scope, source, 0, 20)
    query = start()
    try:
        query.processAllAvailable()
        assert stored(sm, scope, sink) == Counter(written)
        first = sm.describe_stream(scope, source).segments[0].segment
        split = sm.split_segment(scope, source, first)
        written += write(sm, scope, source, 20, 20)  # into the two successors
        query.processAllAvailable()
        assert stored(sm, scope, sink) == Counter(written)
        sm.merge_segments(scope, source, [s.segment for s in split.segments])
        written += write(sm, scope, source, 40, 20)  # into the merged segment
        query.processAllAvailable()
    finally:
        query.stop()
    assert stored(sm, scope, sink) == Counter(written)
    # What came after the split and after the merge reached the sink: the successors were read.
    history = sm.describe_stream(scope, source).history
    assert [len(e.created) for e in history] == [1, 2, 1]

    # A crash after the sink committed the last batch and before Spark recorded it: the commit log's last
    # entry is lost, so the restarted query runs that batch again from its checkpointed offsets.
    commits = sorted((Path(checkpoint) / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    written += write(sm, scope, source, 60, 10)
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert stored(sm, scope, sink) == Counter(written)


def test_a_streaming_offset_is_a_json_of_base64_cuts(millrace_spark: Any, sm: StreamManager, endpoint: str) -> None:
    """What Spark checkpoints: {"scope/stream": StreamCut.to_base64()}, readable as cuts again."""
    from millrace.spark.options import source_options
    from millrace.spark.source import MillraceStreamReader

    scope, stream = new_stream(sm)
    write(sm, scope, stream, 0, 5)
    reader = MillraceStreamReader(source_options({"endpoint": endpoint, "stream": f"{scope}/{stream}"}))
    try:
        start, end = reader.initialOffset(), reader.latestOffset()
        assert StreamCut.from_base64(start[f"{scope}/{stream}"]) == sm.head_cut(scope, stream)
        assert StreamCut.from_base64(end[f"{scope}/{stream}"]) == sm.tail_cut(scope, stream)
        assert len(reader.partitions(start, end)) == 1
        assert reader.partitions(end, end) == []
    finally:
        reader.stop()
