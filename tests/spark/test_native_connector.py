"""format("millrace"), the native Spark connector, against a real server and local[2] Spark: batch reads
between stream cuts (a partition per segment range), the transactional sink exactly once per batch id
(also when a crash interrupted a commit), and a streaming query in a driver of its own that follows a
split and a merge, has its JVM SIGKILLed mid-query, and restarts from its checkpoint with every input in
its sink exactly once. Each stream holds a few dozen events: Spark, not the data, is the cost here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millrace import BytesSerializer, StreamCut, StreamManager, TxnStatus
from tests.server_process import ServerProcess
from tests.spark.conftest import pyspark_missing

if pyspark_missing():
    pytest.skip(str(pyspark_missing()), allow_module_level=True)

from millrace.spark import MillraceDataSource, MillraceOptionError  # noqa: E402 (needs pyspark)
from millrace.spark.options import sink_options  # noqa: E402
from millrace.spark.sink import COMMITTED, COMMITTING, BatchCommitter, BatchRecord  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

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


def start_driver(endpoint: str, source: str, sink: str, sink_id: str, checkpoint: Path,
                 log: Path) -> tuple[subprocess.Popen[str], int]:
    """The streaming query in a Spark driver of its own (tests/spark/native_query_process.py), in a
    process group of its own; returns it and the pid of its JVM."""
    with log.open("a") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tests.spark.native_query_process", endpoint, source, sink,
                                 sink_id, str(checkpoint)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("jvm "), f"the driver did not start its query:\n{log.read_text()[-5000:]}"
    return proc, int(line.split()[1])


def end_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL what is left of a driver's process group (its Python workers), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def kill_after_a_sink_commit(sm: StreamManager, scope: str, sink_id: str, checkpoint: Path, jvm: int,
                             going: Callable[[], bool]) -> int | None:
    """SIGKILL the JVM at the worst moment for exactly-once: the sink has committed a batch and Spark has
    not yet recorded it in its commit log, so the restarted query runs that batch again. Each time the
    sink's commit record says a new batch is committed, the JVM is frozen (SIGSTOP) and Spark's commit
    log looked at: without that batch, the JVM is killed; with it, it goes on (SIGCONT) and the next
    batch is watched, while ``going()``. The batch id the kill followed, or None (nothing killed)."""
    table = sm.key_value_table(scope, "spark-commits")  # the sink's default commit table
    seen = -1
    while going():
        found = table.get(sink_id)
        record = None if found is None else BatchRecord.from_bytes(found[0])
        if record is not None and record.state == COMMITTED and record.batch_id > seen:
            os.kill(jvm, signal.SIGSTOP)
            if not (checkpoint / "commits" / str(record.batch_id)).exists():
                os.kill(jvm, signal.SIGKILL)
                return record.batch_id
            os.kill(jvm, signal.SIGCONT)
            seen = record.batch_id
        time.sleep(0.001)
    return None


def wait_until(what: str, check: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def test_streaming_follows_a_split_and_a_merge_and_survives_a_sigkilled_jvm_exactly_once(
        sm: StreamManager, endpoint: str, tmp_path: Path) -> None:
    """A streaming query in a driver of its own follows a split and a merge of its source while a writer
    keeps writing; then its JVM is SIGKILLed in the middle of the query, input still arriving, right
    after the sink committed a batch that Spark had not recorded yet (``kill_after_a_sink_commit``), and
    the query started again on its checkpoint leaves every input in the transactional sink exactly once."""
    scope, source = new_stream(sm)
    _, sink = new_stream(sm)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
    sink_id = f"stream-{uuid.uuid4().hex[:6]}"

    def held() -> int:
        return sum(stored(sm, scope, sink).values())

    written = write(sm, scope, source, 0, 20)
    feeding: list[tuple[str, bytes]] = []

    def feed() -> None:  # events 20 .. 219, one at a time, for several seconds
        with StreamManager(endpoint) as own, own.create_writer(scope, source, BytesSerializer()) as writer:
            for n in range(20, 220):
                feeding.append((KEYS[n % len(KEYS)], f"event-{n}".encode()))
                writer.write_event(feeding[-1][1], routing_key=feeding[-1][0]).result()
                time.sleep(0.04)

    driver, jvm = start_driver(endpoint, f"{scope}/{source}", f"{scope}/{sink}", sink_id, checkpoint, log)
    feeder = threading.Thread(target=feed, name="feeder")
    try:
        wait_until("the first events in the sink", lambda: held() >= 20)
        split = sm.split_segment(scope, source, sm.describe_stream(scope, source).segments[0].segment)
        feeder.start()
        wait_until("events after the split in the sink", lambda: held() >= 45)
        sm.merge_segments(scope, source, [s.segment for s in split.segments])
        wait_until("events after the merge in the sink", lambda: held() >= 60)
        after = kill_after_a_sink_commit(sm, scope, sink_id, checkpoint, jvm, feeder.is_alive)
        if after is None:
            os.kill(jvm, signal.SIGKILL)  # no batch caught in the window: a kill mid-query all the same
        at_kill = (held(), len(feeding))
    finally:
        end_group(driver)
        feeder.join()
    written += feeding
    print(f"killed the JVM {'after the sink committed batch ' + str(after) if after is not None else 'mid-query'}, "
          f"with {at_kill[0]} events in the sink and {20 + at_kill[1]} written; {len(written)} in all")
    assert at_kill[0] < len(written), "the query had finished everything before the kill: nothing to test"
    # What came after the split and after the merge was read: the successors were followed.
    assert [len(e.created) for e in sm.describe_stream(scope, source).history] == [1, 2, 1]

    driver, _ = start_driver(endpoint, f"{scope}/{source}", f"{scope}/{sink}", sink_id, checkpoint, log)
    try:
        wait_until("every input in the sink", lambda: set(stored(sm, scope, sink)) >= set(written))
        assert driver.stdin is not None
        driver.stdin.write("stop\n")
        driver.stdin.flush()
        assert driver.wait(timeout=300) == 0, log.read_text()[-5000:]
    finally:
        end_group(driver)
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
