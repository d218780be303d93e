"""EventStreamWriter on streams outside the Kafka scope: a stream made by StreamManager gets one
partition per segment on its first writer, splits anywhere (a split inside a partition retires it and
adds one per piece), keeps per-key order and exactly-once across splits and merges, and its events are
stored as Kafka records in its own segments (read back raw here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import Future

import pytest
from confluent_kafka.admin import AdminClient

from millrace import EventPosition, RetentionPolicy, StreamManager, StringSerializer, WriterFencedError
from millrace.client.segments import SegmentClient
from millrace.protocol import messages as m
from millrace.protocol.errors import (
    EventsRefusedError,
    InvalidRequestError,
    StreamNotFoundError,
    StreamSealedError,
)
from millrace.protocol.events import PARTITION_RETIRED, encode_batch
from millrace.protocol.keys import key_hash
from millrace.protocol.records import iter_batches
from millrace.streams.partitions.formats import ENVELOPE, ENVELOPE_MAGIC, INDEX_SUFFIX
from millrace.streams.topics import TopicInfo, carve_slices
from tests.ports import free_port
from tests.server_process import ServerProcess
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stored_events(server: ServerProcess, sm: StreamManager, scope: str,
                  stream: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record in every segment the stream ever had, read raw
    from the segments (each batch behind its partition envelope), sorted by partition and offset."""
    described = sm.describe_stream(scope, stream)
    found = []
    with SegmentClient("127.0.0.1", server.native_port) as segments:
        for epoch in described.history:
            for segment in epoch.created:
                data = b""
                while True:
                    got = segments.read(segment.name, len(data))
                    data += got.data
                    if not got.data:
                        break
                position = 0
                while position < len(data):
                    magic, _, partition, size = ENVELOPE.unpack_from(data, position)
                    assert magic == ENVELOPE_MAGIC
                    start = position + ENVELOPE.size
                    for batch in iter_batches(data[start:start + size]):
                        found += [(partition, r.offset, r.key, r.value) for r in batch.records()]
                    position = start + size
    return sorted(found)


def test_a_writer_for_a_stream_in_any_scope(server: ServerProcess, uri: str) -> None:
    sm = StreamManager(uri)
    sm.create_scope("iot")
    sm.create_stream("iot", "readings", initial_segments=2)
    writer = sm.create_writer("iot", "readings")
    writer.write_event(b"21.5", routing_key="sensor-7").result()
    writer.flush(); writer.close()  # noqa: E702 (the README-style snippet, kept as written)

    assert writer.slices == [(0.0, 0.5), (0.5, 1.0)]  # one partition per segment
    assert sm.describe_stream("iot", "readings").partition_count == 2
    assert [(k, v) for _, _, k, v in stored_events(server, sm, "iot", "readings")] == [(b"sensor-7", b"21.5")]
    again = sm.create_writer("iot", "readings")  # the partitions, once made, stay
    assert again.slices == writer.slices
    assert again.write_event(b"22.0", routing_key="sensor-7").result(30).offset == 1
    again.close()
    sm.close()
    # Kafka clients see topics only: a partitioned stream of another scope is not one.
    listed = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30).topics
    assert not any("readings" in name for name in listed)


def test_partitions_are_the_segments_at_the_first_writer(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("sizes")
        for segments in (1, 3, 5, 20):
            sm.create_stream("sizes", f"s{segments}", initial_segments=segments)
            writer = sm.create_writer("sizes", f"s{segments}")
            ranges = [(s.segment.key_start, s.segment.key_end) for s in sm.describe_stream("sizes", f"s{segments}").segments]
            assert writer.slices == sorted(ranges)
            writer.close()
        # Scaled before its first writer, at points no equal division has: it still takes events.
        sm.create_stream("sizes", "early", initial_segments=1)
        sm.split_segment("sizes", "early", sm.describe_stream("sizes", "early").segments[0].segment, at=[0.3, 0.77])
        writer = sm.create_writer("sizes", "early")
        assert writer.slices == [(0.0, 0.3), (0.3, 0.77), (0.77, 1.0)]
        writer.write_event(b"x", routing_key="k").result(30)
        writer.close()


def test_a_kafka_scope_stream_is_made_as_a_kafka_topic_only(uri: str) -> None:
    """A stream of the Kafka scope made by create_stream would have no topic record: neither a topic
    Kafka clients see nor one a writer could open. It is refused, naming the way that works."""
    with StreamManager(uri) as sm, pytest.raises(InvalidRequestError, match="CreateTopics"):
        sm.create_stream("kafka", "made-natively", initial_segments=4)


def test_a_writer_for_an_unknown_stream_is_refused(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("nowhere")
        with pytest.raises(StreamNotFoundError):
            sm.create_writer("nowhere", "missing")


def test_order_and_exactly_once_across_splits_and_a_merge(server: ServerProcess, uri: str) -> None:
    keys = [f"device-{n}" for n in range(16)]
    with StreamManager(uri) as sm:
        sm.create_scope("plant")
        sm.create_stream("plant", "elastic", initial_segments=1)
        writer = sm.create_writer("plant", "elastic", StringSerializer(), writer_id="plant-loader")
        futures: list[tuple[str, Future[EventPosition]]] = []
        for round_ in range(4):
            for i in range(100):
                futures += [(k, writer.write_event(f"{k}:{round_ * 100 + i}", routing_key=k)) for k in keys]
            if round_ < 3:
                segment = sm.describe_stream("plant", "elastic").segments[0].segment
                sm.split_segment("plant", "elastic", segment)  # while appends are in flight
            else:
                low, high = (s.segment for s in sm.describe_stream("plant", "elastic").segments[:2])
                sm.merge_segments("plant", "elastic", [low, high])
        writer.flush()
        writer.close()
        described = sm.describe_stream("plant", "elastic")
        assert len(described.segments) == 3
        # Each split cut a partition: it retired, and its pieces are new partitions.
        assert described.partition_count == 1 + 2 * 3
        stored = stored_events(server, sm, "plant", "elastic")

    by_key: dict[str, list[EventPosition]] = defaultdict(list)
    for k, fut in futures:
        by_key[k].append(fut.result(30))
    assert len(stored) == len(futures) == len({(p, o) for p, o, _, _ in stored})  # each event once
    for k in keys:
        landed = by_key[k]
        # A key moves only from a retired partition to one of its pieces, which are numbered after it:
        # sorted by (partition, offset), its events are in the order written.
        assert [p.partition for p in landed] == sorted(p.partition for p in landed)
        mine = [(p, o, v) for p, o, key, v in stored if key == k.encode()]
        assert [(p, o) for p, o, _ in mine] == [(x.partition, x.offset) for x in landed]
        assert [v for _, _, v in mine] == [f"{k}:{i}".encode() for i in range(400)]


def test_a_second_instance_fences_the_first_outside_kafka(server: ServerProcess, uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("fence")
        sm.create_stream("fence", "s", initial_segments=2)
        first = sm.create_writer("fence", "s", writer_id="w")
        first.write_event(b"a", routing_key="k").result(30)
        second = sm.create_writer("fence", "s", writer_id="w")
        second.write_event(b"b", routing_key="k").result(30)
        with pytest.raises(WriterFencedError):
            first.write_event(b"zombie", routing_key="k").result(30)
        second.close()
        assert [v for _, _, _, v in stored_events(server, sm, "fence", "s")] == [b"a", b"b"]



def test_partitions_and_offsets_survive_a_restart(tmp_path) -> None:
    data = str(tmp_path / "data")
    args = ("--native-port", str(free_port()), "--kafka-port", str(free_port()))
    server = ServerProcess(data, *args).start()
    try:
        uri = f"tcp://127.0.0.1:{server.native_port}"
        with StreamManager(uri) as sm:
            sm.create_scope("lab")
            sm.create_stream("lab", "s", initial_segments=4)
            writer = sm.create_writer("lab", "s", writer_id="lab-writer")
            first = [writer.write_event(b"%d" % i, routing_key="k").result(30) for i in range(5)]
            writer.close()
        server.kill()
        server = ServerProcess(data, *args).start()
        with StreamManager(uri) as sm:
            writer = sm.create_writer("lab", "s", writer_id="lab-writer")
            later = writer.write_event(b"5", routing_key="k").result(30)
            writer.close()
            assert (later.partition, later.offset) == (first[0].partition, 5)  # same slices, offsets go on
            assert [v for _, _, _, v in stored_events(server, sm, "lab", "s")] == [b"%d" % i for i in range(6)]
    finally:
        server.kill()


def _offsets_are_dense(events: list[tuple[int, int, bytes | None, bytes | None]]) -> bool:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _, _ in events:
        by_partition[partition].append(offset)
    return all(offsets == list(range(len(offsets))) for offsets in by_partition.values())


def _wait_for_index(server: ServerProcess, segment: str) -> None:
    """Until the gateway has written the index entries of ``segment``'s batches (shortly after they
    are durable)."""
    with SegmentClient("127.0.0.1", server.native_port) as raw:
        deadline = time.monotonic() + 30
        while raw.get_info(segment + INDEX_SUFFIX).length == 0:
            assert time.monotonic() < deadline, f"{segment} got no index entries"
            time.sleep(0.02)


def test_a_deleted_stream_re_created_under_its_name_starts_fresh(tmp_path) -> None:
    """Deleting a stream drops its partitions (record, partition state, log starts, index segments):
    the new stream is partitioned for its own segment count, and its offsets start at 0, also after a
    restart (an old index segment of the same name would be loaded as the new stream's)."""
    data = str(tmp_path / "data")
    args = ("--native-port", str(free_port()), "--kafka-port", str(free_port()))
    server = ServerProcess(data, *args).start()
    try:
        uri = f"tcp://127.0.0.1:{server.native_port}"
        with StreamManager(uri) as sm:
            sm.create_scope("redo")
            for round_, (segments, partitions) in enumerate(((1, 1), (3, 3), (1, 1))):
                if sm.list_streams("redo"):
                    sm.seal_stream("redo", "s")
                    sm.delete_stream("redo", "s")
                sm.create_stream("redo", "s", initial_segments=segments)
                assert sm.describe_stream("redo", "s").partition_count is None  # no partitions left over
                with sm.create_writer("redo", "s") as writer:
                    for i in range(10 * segments):
                        writer.write_event(b"v%d" % i, routing_key=f"{round_}-{i}").result(30)
                assert sm.describe_stream("redo", "s").partition_count == partitions
                events = stored_events(server, sm, "redo", "s")
                assert sorted(v for _, _, _, v in events) == sorted(b"v%d" % i for i in range(10 * segments))
                assert _offsets_are_dense(events)
                _wait_for_index(server, "redo/s/0.#epoch.0")  # so that there is an old index to drop
        server.kill()
        server = ServerProcess(data, *args).start()
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
            with sm.create_writer("redo", "s") as writer:
                # Into every partition: one that loaded an old entry would continue after it.
                written = [writer.write_event(b"w%d" % i, routing_key=f"after-{i}") for i in range(200)]
                assert {f.result(30).partition for f in written} == {0}
            events = stored_events(server, sm, "redo", "s")
            assert len(events) == 210 and _offsets_are_dense(events)
    finally:
        server.kill()


def retained_events(server: ServerProcess, sm: StreamManager, scope: str,
                    stream: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Like ``stored_events``, from each current segment's start (after truncation) to its end."""
    found = []
    with SegmentClient("127.0.0.1", server.native_port) as segments:
        for state in sm.describe_stream(scope, stream).segments:
            name = state.segment.name
            data = b""
            start = segments.get_info(name).start_offset
            while True:
                got = segments.read(name, start + len(data))
                data += got.data
                if not got.data:
                    break
            position = 0
            while position < len(data):
                magic, _, partition, size = ENVELOPE.unpack_from(data, position)
                assert magic == ENVELOPE_MAGIC
                begin = position + ENVELOPE.size
                for batch in iter_batches(data[begin:begin + size]):
                    found += [(partition, r.offset, r.key, r.value) for r in batch.records()]
                position = begin + size
    return sorted(found)


def test_a_native_stream_s_retention_policy_truncates_it(tmp_path) -> None:
    """The stream's own retention policy drives the gateway's retention for event-written streams:
    by size over the whole stream (oldest batches first), by time per batch."""
    data = str(tmp_path / "data")
    server = ServerProcess(data, "--retention-check-seconds", "0.2").start()
    try:
        with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
            sm.create_scope("ret")
            sm.create_stream("ret", "by-size", initial_segments=2, retention=RetentionPolicy.by_size(4000))
            payloads = [b"%04d" % i + b"x" * 96 for i in range(300)]
            with sm.create_writer("ret", "by-size") as writer:
                for i, payload in enumerate(payloads):
                    writer.write_event(payload, routing_key=f"k{i}").result(30)

            def segment_starts() -> list[int]:
                return [s.start_offset or 0 for s in sm.describe_stream("ret", "by-size").segments]

            def kept() -> list[bytes | None]:
                return [v for _, _, _, v in retained_events(server, sm, "ret", "by-size")]

            # Retention runs every 0.2 s, also while the events are written (one at a time, so slowly on a
            # busy machine): a round in the middle truncates both segments already, so wait for the round
            # that sees them all.
            wait_for(lambda: all(start > 0 for start in segment_starts()) and len(kept()) < len(payloads) // 2,
                        "both segments truncated to under half")  # 30 KB written, a 4 KB policy
            assert set(payloads[-20:]) <= set(kept())  # the newest 2 KB are all there

            sm.create_stream("ret", "by-time", initial_segments=1, retention=RetentionPolicy.by_time(500))
            with sm.create_writer("ret", "by-time") as writer:
                old = [writer.write_event(b"old", routing_key="k").result(30) for _ in range(20)]

                def all_dropped() -> bool:
                    (state,) = sm.describe_stream("ret", "by-time").segments
                    return state.start_offset == state.length

                wait_for(all_dropped, "every batch older than 500 ms dropped")
                new = writer.write_event(b"new", routing_key="k").result(30)
            assert new.offset == old[-1].offset + 1  # offsets go on after the dropped ones
            assert [v for _, _, _, v in retained_events(server, sm, "ret", "by-time")] == [b"new"]
    finally:
        server.kill()




def test_a_native_stream_splits_anywhere_and_merges_back_under_a_reader_group(sm: StreamManager) -> None:
    """Pravega's scaling on a native stream: split at 0.3, the upper piece into 5, all merged back into
    one, while a writer writes and a reader group of two reads: every event read once, in order per key."""
    scope, stream, keys, total = "anywhere", "s", 24, 6000
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    writer = sm.create_writer(scope, stream, StringSerializer(), writer_id="anywhere-writer")
    group = sm.create_reader_group("anywhere-group", scope, stream, serializer=StringSerializer())
    read: list[tuple[str, int]] = []
    lock = threading.Lock()
    done = threading.Event()

    def read_with(reader_id: str) -> None:
        reader = group.create_reader(reader_id)
        while not done.is_set() or len(read) < total:
            event = reader.read_next_event(timeout=0.5)
            if event is not None and not event.is_checkpoint and event.data is not None:
                key, _, seq = event.data.partition(":")
                with lock:  # before the next read: only that one may hand the segment's successors on
                    read.append((key, int(seq)))
            if len(read) >= total:
                break
        reader.close()

    readers = [threading.Thread(target=read_with, args=(f"r{i}",), daemon=True) for i in range(2)]
    for t in readers:
        t.start()
    progress = [0]

    def write() -> None:
        for i in range(total):
            writer.write_event(f"k{i % keys}:{i // keys}", routing_key=f"k{i % keys}")
            if i % 100 == 99:
                writer.flush()
                progress[0] = i + 1
        writer.flush()
        progress[0] = total

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    wait_for(lambda: progress[0] >= 1500, "1500 events written")
    (whole,) = sm.describe_stream(scope, stream).segments
    sm.split_segment(scope, stream, whole.segment, at=[0.3])  # inside the stream's only partition
    ranges = [(s.segment.key_start, s.segment.key_end) for s in sm.describe_stream(scope, stream).segments]
    assert ranges == [(0.0, 0.3), (0.3, 1.0)]
    wait_for(lambda: progress[0] >= 3000, "3000 events written")
    upper = sm.describe_stream(scope, stream).segments[1].segment
    sm.split_segment(scope, stream, upper, pieces=5)
    assert len(sm.describe_stream(scope, stream).segments) == 6
    wait_for(lambda: progress[0] >= 4500, "4500 events written")
    sm.merge_segments(scope, stream, [s.segment for s in sm.describe_stream(scope, stream).segments])
    writing.join(120)
    assert progress[0] == total
    writer.close()
    done.set()
    for t in readers:
        t.join(120)
    described = sm.describe_stream(scope, stream)
    assert [(s.segment.key_start, s.segment.key_end) for s in described.segments] == [(0.0, 1.0)]
    assert described.partition_count == 1 + 2 + 5  # one retired by each split, one per piece

    assert len(read) == total and len(set(read)) == total  # each once
    for k in range(keys):
        assert [seq for key, seq in read if key == f"k{k}"] == list(range(total // keys))  # in order


def test_a_writer_opened_again_after_a_split_skips_what_it_wrote_before(sm: StreamManager, server: ServerProcess) -> None:
    """Exactly once across a split inside a partition: a writer id's events written before the split are
    recognised when an instance opened after it writes them again (their keys route to the new pieces;
    the retired partition, whose slice holds theirs, recorded the numbers)."""
    scope, stream = "again", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    events = [(f"key-{i}", f"v{i}") for i in range(300)]
    with sm.create_writer(scope, stream, StringSerializer(), writer_id="w") as first:
        for number, (key, value) in enumerate(events):
            first.write_event(value, routing_key=key, event_number=number)
    (whole,) = sm.describe_stream(scope, stream).segments
    sm.split_segment(scope, stream, whole.segment, at=[0.42])
    with sm.create_writer(scope, stream, StringSerializer(), writer_id="w") as second:
        assert second.slices == [(0.0, 1.0), (0.0, 0.42), (0.42, 1.0)]
        again = [second.write_event(value, routing_key=key, event_number=number)
                 for number, (key, value) in enumerate(events)]
        assert {f.result(30).offset for f in again} == {-1}  # every one written before
        second.write_event("new", routing_key="key-0", event_number=len(events)).result(30)
    stored = [v for _, _, _, v in stored_events(server, sm, scope, stream)]
    assert sorted(stored) == sorted([v.encode() for _, v in events] + [b"new"])


def test_a_transaction_open_across_a_split_lands_by_key(sm: StreamManager, server: ServerProcess) -> None:
    """A transaction's events written to a partition that retires before the commit land, at the commit,
    in the pieces that hold their keys (so a reader of the successors finds each key where it belongs)."""
    scope, stream = "txsplit", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    txw = sm.create_transaction_writer(scope, stream, "tx", StringSerializer())
    txn = txw.begin_txn()
    keys = [f"key-{i}" for i in range(40)]
    for key in keys:
        txn.write_event(f"{key}:before", routing_key=key)
    (whole,) = sm.describe_stream(scope, stream).segments
    sm.split_segment(scope, stream, whole.segment, at=[0.5])
    for key in keys:
        txn.write_event(f"{key}:after", routing_key=key)
    txn.commit()
    txw.close()
    slices = {0: (0.0, 1.0), 1: (0.0, 0.5), 2: (0.5, 1.0)}
    stored = stored_events(server, sm, scope, stream)
    assert len(stored) == 2 * len(keys)
    for partition, _, key, _value in stored:
        assert partition in (1, 2)  # nothing in the retired partition
        lo, hi = slices[partition]
        assert key is not None and lo <= key_hash(key.decode()) < hi
    for key in keys:
        assert [v for _, _, k, v in stored if k == key.encode()] == [f"{key}:before".encode(), f"{key}:after".encode()]


def test_a_retired_partition_answers_a_numbered_batch_it_holds_as_stored(sm: StreamManager,
                                                                         server: ServerProcess) -> None:
    """A retired partition takes no new batch, but one it holds by writer event numbers answers as stored
    (offset -1), as one it holds by producer sequence does: how a resumed commit's merge, appending
    through a cluster's partition leader, learns which of its pieces a partition retired since holds."""
    scope, stream = "resend", "s"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    with sm.create_writer(scope, stream, StringSerializer(), writer_id="w") as writer:
        for number in range(3):
            writer.write_event(f"v{number}", routing_key=f"key-{number}", event_number=number)
    (whole,) = sm.describe_stream(scope, stream).segments
    sm.split_segment(scope, stream, whole.segment, at=[0.5])

    def append(number: int) -> int:
        request = m.AppendEvents(scope=scope, stream=stream, partition=0, writer_id="w", first_event=number,
                                 last_event=number)
        header, _ = segments.call(request, encode_batch([(f"key-{number}".encode(), f"v{number}".encode())],
                                                        int(time.time() * 1000)))
        return m.decode_reply(m.OffsetReply, header).offset

    with SegmentClient("127.0.0.1", server.native_port) as segments:
        assert append(2) == -1
        with pytest.raises(EventsRefusedError) as refused:
            append(3)
        assert refused.value.reason == PARTITION_RETIRED
    assert len(stored_events(server, sm, scope, stream)) == 3


def test_a_commit_resumed_after_another_split_lands_every_event_once(tmp_path) -> None:
    """A commit cut off mid-merge (its first pass landed some batches in a partition), the stream split
    inside that partition, the commit resumed: the partition keeps what it took and only the rest goes
    to its pieces, each event once (it used to route everything again, landing those batches twice).
    The harness builds the server's parts over a real store in its own process (``txn_resume_process``)."""
    run = subprocess.run([sys.executable, "-m", "tests.client.txn_resume_process", str(tmp_path / "data")],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    stored = found["records"]
    written = [(f"k{i}", f"{b}:{i}") for b in range(found["batches"]) for i in range(found["events"])]
    assert sorted((key, value) for _, key, value in stored) == sorted(written)  # each once
    slices = {1: (0.0, 0.5), 2: (0.5, 1.0)}
    for partition, key, value in stored:
        if int(value.split(":")[0]) < found["landed"]:
            assert partition == 0  # landed by the first pass, before the split
        else:
            lo, hi = slices[partition]
            assert lo <= key_hash(key) < hi


def test_carving_slices() -> None:
    topic = TopicInfo("s/x", uuid.uuid4(), ((0.0, 0.5), (0.5, 1.0)))
    assert carve_slices(topic, [0.5]) is topic  # a boundary already
    carved = carve_slices(topic, [0.25, 0.3, 0.5])
    assert carved.slices == ((0.0, 0.5), (0.5, 1.0), (0.0, 0.25), (0.25, 0.3), (0.3, 0.5))
    assert carved.retired == {0}
    again = carve_slices(carved, [0.1, 0.75])
    assert again.retired == {0, 1, 2} and again.slices[5:] == ((0.5, 0.75), (0.75, 1.0), (0.0, 0.1), (0.1, 0.25))
    assert [again.partition_for_key(k) for k in ("a", "b")] == [
        next(p for p, (lo, hi) in enumerate(again.slices) if lo <= key_hash(k) < hi and p not in again.retired)
        for k in ("a", "b")]
    assert TopicInfo.decode("s/x", again.encode()) == again


def test_the_partitions_live_at_an_earlier_count_and_a_retired_one_s_pieces() -> None:
    """Slices are only appended, so the record at any earlier partition count is recoverable: what a
    resumed commit routes against (``txn_merge``)."""
    first = TopicInfo("s/x", uuid.uuid4(), ((0.0, 0.5), (0.5, 1.0)))
    second = carve_slices(first, [0.25])  # 0 retires into 2, 3
    third = carve_slices(second, [0.1, 0.75])  # 1 retires into 4, 5 and 2 into 6, 7
    assert third.slices[4:] == ((0.5, 0.75), (0.75, 1.0), (0.0, 0.1), (0.1, 0.25))
    assert third.view(len(third.slices)) is third
    assert third.view(2) == first
    assert third.view(4) == second
    assert third.view(4).retired == {0}
    assert [third.pieces_of(p) for p in range(len(third.slices))] == [(2, 3), (4, 5), (6, 7), (), (), (), (), ()]
    assert second.pieces_of(0) == (2, 3) and second.pieces_of(1) == ()
    # A carve of several pieces and a nested one: each piece list covers its parent's slice in key order.
    deep = carve_slices(carve_slices(TopicInfo("s/y", uuid.uuid4(), ((0.0, 1.0),)), [0.2, 0.4, 0.6]), [0.3])
    assert deep.pieces_of(0) == (1, 2, 3, 4) and deep.pieces_of(2) == (5, 6)
    assert deep.view(5).retired == {0} and deep.view(5).slices == deep.slices[:5]
    with pytest.raises(ValueError, match="no view at 9"):
        deep.view(9)


def test_a_writer_on_a_stream_sealed_under_it_fails_with_stream_sealed(sm: StreamManager) -> None:
    """A segment sealed under a writer's batch is a scale (send again) or the stream's seal: the writer
    asks which, and for a sealed stream fails the events with StreamSealedError, not a segment's name."""
    sm.create_scope("closing")
    sm.create_stream("closing", "s", initial_segments=1)
    writer = sm.create_writer("closing", "s")
    writer.write_event(b"before", routing_key="k").result(30)
    sm.seal_stream("closing", "s")
    with pytest.raises(StreamSealedError, match="closing/s is sealed"):
        writer.write_event(b"after", routing_key="k").result(30)
    with pytest.raises(StreamSealedError):
        writer.write_event(b"later", routing_key="k").result(30)
    writer.close()
