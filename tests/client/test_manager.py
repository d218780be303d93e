"""StreamManager against a real server: scopes, streams and their configuration, stream cuts, errors,
reconnection."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest

from millrace import (
    InvalidStreamCutError,
    RetentionPolicy,
    ScalingPolicy,
    ScopeNotEmptyError,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from millrace.client.segments import SegmentClient
from millrace.client.streams import Segment
from millrace.protocol.errors import InvalidRequestError, SegmentNotFoundError, UnknownCommandError
from millrace.protocol.keys import key_hash
from millrace.protocol.wire import Command
from tests.ports import free_port
from tests.server_process import ServerProcess


def test_first_calls_prefix(uri: str) -> None:
    """The issue's "first calls" as far as the client has them (StreamManager, scopes, streams)."""
    sm = StreamManager(uri)
    sm.create_scope("iot")
    sm.create_stream("iot", "readings", initial_segments=2)
    described = sm.describe_stream("iot", "readings")
    assert [(s.segment.key_start, s.segment.key_end) for s in described.segments] == [(0.0, 0.5), (0.5, 1.0)]
    sm.close()


def test_scopes_and_streams(uri: str) -> None:
    with StreamManager(uri) as sm:
        assert sm.create_scope("shop")
        assert not sm.create_scope("shop")
        assert "shop" in sm.list_scopes()
        config = StreamConfiguration(3, ScalingPolicy.by_event_rate(500, scale_factor=3, min_segments=2),
                                     RetentionPolicy.by_time(60_000))
        assert sm.create_stream("shop", "orders", config)
        assert not sm.create_stream("shop", "orders")
        assert sm.create_stream("shop", "clicks", scaling=ScalingPolicy.by_data_rate(64, min_segments=2))
        assert sm.list_streams("shop") == ["clicks", "orders"]

        orders = sm.describe_stream("shop", "orders")
        assert orders.config == config
        assert len(orders.segments) == 3 and orders.state == "active" and orders.partition_count is None
        assert [e.reason for e in orders.history] == ["create"]
        # A rate policy without an explicit count starts at its minimum.
        assert len(sm.describe_stream("shop", "clicks").segments) == 2

        updated = StreamConfiguration(3, ScalingPolicy.fixed(3), RetentionPolicy.by_size(1 << 20))
        sm.update_stream("shop", "orders", updated)
        assert sm.describe_stream("shop", "orders").config == updated

        with pytest.raises(ScopeNotEmptyError):
            sm.delete_scope("shop")
        with pytest.raises(StreamNotSealedError):
            sm.delete_stream("shop", "orders")
        for stream in ("orders", "clicks"):
            sm.seal_stream("shop", stream)
            described = sm.describe_stream("shop", stream)
            assert described.sealed and all(s.sealed for s in described.segments)
            with pytest.raises(StreamSealedError):
                sm.update_stream("shop", stream, updated)
            sm.delete_stream("shop", stream)
        with pytest.raises(StreamNotFoundError):
            sm.describe_stream("shop", "orders")
        sm.delete_scope("shop")
        assert "shop" not in sm.list_scopes()


def _write_to(sm: StreamManager, scope: str, stream: str, segment: Segment, count: int) -> None:
    """``count`` events whose routing keys hash into ``segment``'s key range (raw bytes never enter an
    event stream: ``streams/segment_gate.py``)."""
    with sm.create_writer(scope, stream) as writer:
        written = 0
        for i in itertools.count():
            key = f"k{i}"
            if segment.key_start <= key_hash(key) < segment.key_end:
                writer.write_event(b"e", routing_key=key)
                written += 1
                if written == count:
                    break
        writer.flush()


def test_stream_cuts_through_scaling_and_truncation(uri: str, server: ServerProcess) -> None:
    with StreamManager(uri) as sm, SegmentClient("127.0.0.1", server.native_port) as segments:
        sm.create_scope("cuts")
        sm.create_stream("cuts", "s", initial_segments=2)
        first = sm.describe_stream("cuts", "s")
        low, high = (s.segment for s in first.segments)
        head = sm.head_cut("cuts", "s")
        assert head == StreamCut("cuts", "s", {low.segment_id: 0, high.segment_id: 0})
        assert sm.tail_cut("cuts", "s") == head

        _write_to(sm, "cuts", "s", low, 3)
        _write_to(sm, "cuts", "s", high, 2)
        low_end, high_end = segments.get_info(low.name).length, segments.get_info(high.name).length
        assert low_end > 0 and high_end > 0
        assert sm.tail_cut("cuts", "s").positions == {low.segment_id: low_end, high.segment_id: high_end}
        before_split_ms = int(time.time() * 1000)
        time.sleep(0.01)  # the split's epoch must be created strictly after before_split_ms

        split = sm.split_segment("cuts", "s", low)
        pieces = [s.segment for s in split.segments if s.segment.segment_id != high.segment_id]
        assert len(pieces) == 2 and {p.epoch for p in pieces} == {1}
        assert split.history[-1].sealed == (low,)
        _write_to(sm, "cuts", "s", pieces[0], 1)
        piece_end = segments.get_info(pieces[0].name).length
        tail = sm.tail_cut("cuts", "s")
        assert tail.positions == {pieces[0].segment_id: piece_end, pieces[1].segment_id: 0, high.segment_id: high_end}

        # At a time before the split: epoch 0's start; now: epoch 1's start.
        assert sm.cut_at_time("cuts", "s", before_split_ms) == head
        now = sm.cut_at_time("cuts", "s", int(time.time() * 1000))
        assert now.positions == {pieces[0].segment_id: 0, pieces[1].segment_id: 0, high.segment_id: 0}

        sm.truncate_stream(tail)
        assert sm.head_cut("cuts", "s") == tail
        with pytest.raises(SegmentNotFoundError):  # wholly before the cut: deleted
            segments.get_info(low.name)
        assert segments.get_info(high.name).start_offset == high_end
        # The time before the split now lies before the head: the head answers.
        assert sm.cut_at_time("cuts", "s", before_split_ms) == tail
        with pytest.raises(InvalidStreamCutError):
            sm.truncate_stream(head)  # the head never moves back


def test_malformed_requests_get_an_error_status_and_the_server_lives(uri: str, server: ServerProcess) -> None:
    with SegmentClient("127.0.0.1", server.native_port) as raw:
        with pytest.raises(InvalidRequestError):
            raw.call_raw(Command.CREATE_STREAM, {"stream": "no-scope"})
        with pytest.raises(InvalidRequestError):
            raw.call_raw(Command.CREATE_STREAM, {"scope": "x", "stream": "y", "initial_segments": "many"})
        with pytest.raises(InvalidRequestError):
            raw.call_raw(Command.READ, {"segment": "x/y/0.#epoch.0", "offset": "zero"})
        with pytest.raises(InvalidRequestError, match="unknown field"):  # a misspelt field is no default
            raw.call_raw(Command.CREATE_SCOPE, {"scope": "x", "scpoe": "y"})
        with pytest.raises(UnknownCommandError):
            raw.call_raw(99, {})
        # Key-value and event commands refuse what does not add up, without harm.
        raw.create_scope("malformed")
        raw.call_raw(Command.CREATE_KV_TABLE, {"scope": "malformed", "table": "t"})
        with pytest.raises(InvalidRequestError):
            raw.call_raw(Command.KV_PUT, {"scope": "malformed", "table": "t", "partition": 0, "keys": [3],
                                      "values": [5], "expected": [None]}, b"abc")  # 3 bytes short
        with pytest.raises(InvalidRequestError):
            raw.call_raw(Command.KV_GET, {"scope": "malformed", "table": "t", "partition": 7, "keys": []})
        with pytest.raises(StreamNotFoundError):
            raw.call_raw(Command.OPEN_WRITER, {"scope": "kafka", "stream": "no-such-topic", "writer_id": "w"})
        with pytest.raises(InvalidRequestError, match="CreateTopics"):  # it would have no topic record
            raw.call_raw(Command.CREATE_STREAM, {"scope": "kafka", "stream": "not-a-topic"})
        with pytest.raises(StreamNotFoundError):
            raw.call_raw(Command.APPEND_EVENTS, {"scope": "kafka", "stream": "not-a-topic", "partition": 0}, b"x")
        assert raw.list_scopes()  # the same connection still works
    with StreamManager(uri) as sm:
        assert "kafka" in sm.list_scopes()



def test_manager_reconnects_after_a_server_crash(tmp_path) -> None:
    port = free_port()
    data = str(tmp_path / "data")
    server = ServerProcess(data, "--native-port", str(port)).start()
    try:
        sm = StreamManager(f"tcp://127.0.0.1:{port}", reconnect_timeout=60.0)
        sm.create_scope("crash")
        sm.create_stream("crash", "s", initial_segments=4)
        server.kill()
        server = ServerProcess(data, "--native-port", str(port)).start()
        # The pool's connection died with the server; the next call reconnects by itself.
        assert len(sm.describe_stream("crash", "s").segments) == 4
        assert sm.list_streams("crash") == ["s"]
        sm.close()
    finally:
        server.kill()


def test_importing_the_server_does_not_load_the_client() -> None:
    code = ("import sys, millrace.gateway.commands.server, millrace.store.segment_store; "
            "loaded = [m for m in sys.modules if m.startswith('millrace.client')]; "
            "assert not loaded, loaded; "
            "from millrace import StreamManager; assert 'millrace.client.manager' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_client_imports_no_server_module() -> None:
    code = ("import sys, millrace; from millrace import StreamManager; "
            "import millrace.client.segments, millrace.client.controller; "
            "bad = [m for m in sys.modules if m.startswith(('millrace.store', 'millrace.gateway', 'twisted'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_names_starting_with_an_underscore_are_reserved(uri: str) -> None:
    """As Pravega's validateUserStreamName: a user's `_RG...` stream would be taken for a reader group's
    state. Reader groups themselves still make theirs."""
    from millrace import ReaderGroupManager

    with StreamManager(uri) as sm:
        sm.create_scope("reserved")
        for make in (lambda: sm.create_stream("reserved", "_RGmine"),
                     lambda: sm.create_synchronizer("reserved", "_state", {}),
                     lambda: sm.create_byte_stream("reserved", "_bytes")):
            with pytest.raises(ValueError, match="reserved"):
                make()
        assert sm.list_streams("reserved") == []
        sm.create_stream("reserved", "events")
        groups = ReaderGroupManager(sm, "reserved")
        groups.create_reader_group("app", ["events"])
        assert "_RGapp" in sm.list_streams("reserved")


def test_every_public_name_resolves() -> None:
    """``from millrace import X`` works for every name ``millrace.__all__`` lists, the errors the client
    raises included."""
    import millrace

    for name in millrace.__all__:
        assert getattr(millrace, name) is not None, name
    assert {"SegmentSealedError", "OffsetOutOfRangeError", "InvalidRequestError"} <= set(millrace.__all__)
