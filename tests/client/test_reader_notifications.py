"""A reader group's notifications against a real server, as Pravega's segment and end-of-data
notifiers: the number of segments after splits, end of data once sealed streams are read, listeners
that stop when unregistered, and listeners of ``millrace.aio`` groups running on the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from millrace import (
    EndOfDataNotification,
    SegmentNotification,
    StreamManager,
)
from millrace.aio import AsyncStreamManager
from tests.client.conftest import drain


def write(sm: StreamManager, scope: str, stream: str, first: int, count: int) -> None:
    with sm.create_writer(scope, stream) as writer:
        for n in range(first, first + count):
            writer.write_event(b"event %d" % n, routing_key=f"key-{n}")


def wait_until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds (a generous bound: a notifier polls every 0.05 s here)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the notifier never told its listener"
        time.sleep(0.02)


def test_segment_notifier_tells_each_new_count_until_unregistered(sm: StreamManager) -> None:
    scope, stream = "notify-split", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=1)
    write(sm, scope, stream, 0, 10)
    group = sm.create_reader_group("g", scope, stream)
    notifier = group.segment_notifier(interval=None)  # checked by hand: no timing in the test
    first: list[SegmentNotification] = []
    second: list[SegmentNotification] = []
    notifier.register_listener(first.append)
    notifier.register_listener(second.append)

    assert notifier.check() == SegmentNotification(number_of_segments=1, number_of_readers=0)
    reader = group.create_reader("r")
    assert notifier.check() is None  # a reader joining changes no number of segments
    assert len(drain(reader)) == 10

    # A split: once the reader has read the split segment to its end, the group reads both successors.
    sm.split_segment(scope, stream, sm.describe_stream(scope, stream).segments[0].segment)
    write(sm, scope, stream, 10, 10)
    assert len(drain(reader)) == 10
    assert notifier.check() == SegmentNotification(number_of_segments=2, number_of_readers=1)
    assert first == second == [SegmentNotification(1, 0), SegmentNotification(2, 1)]

    # Unregistered, a listener is told nothing more; the other still is.
    notifier.unregister_listener(first.append)
    sm.split_segment(scope, stream, sm.describe_stream(scope, stream).segments[0].segment)
    write(sm, scope, stream, 20, 10)
    assert len(drain(reader)) == 10
    assert notifier.check() == SegmentNotification(number_of_segments=3, number_of_readers=1)
    assert second[-1] == SegmentNotification(3, 1)
    assert first == [SegmentNotification(1, 0), SegmentNotification(2, 1)]
    reader.close()
    group.close()


def test_end_of_data_fires_once_when_the_sealed_stream_is_read(sm: StreamManager) -> None:
    scope, stream = "notify-end", "orders"
    sm.create_scope(scope)
    sm.create_stream(scope, stream, initial_segments=2)
    write(sm, scope, stream, 0, 20)
    group = sm.create_reader_group("g", scope, stream)
    notifier = group.end_of_data_notifier(interval=0.05)  # its own thread polls
    told: list[tuple[EndOfDataNotification, int]] = []
    notifier.register_listener(lambda n: told.append((n, threading.get_ident())))
    reader = group.create_reader("r")
    assert len(drain(reader)) == 20
    assert notifier.check() is None  # everything read, but the stream is not sealed: more may come

    sm.seal_stream(scope, stream)
    assert drain(reader) == []  # the reader finds the sealed ends and completes its segments
    wait_until(lambda: told)
    assert told[0][0] == EndOfDataNotification()
    assert told[0][1] != threading.get_ident()  # told on the notifier's thread
    assert notifier.check() is None and notifier.check() is None  # once: checking again tells nothing
    assert len(told) == 1

    # A reset gives the group its data again: read to the end once more, it is told again, once.
    reader.close()
    group.reset_to(sm.head_cut(scope, stream))
    assert notifier.check() is None
    again = group.create_reader("r")
    assert len(drain(again)) == 20
    wait_until(lambda: len(told) == 2)
    assert notifier.check() is None and len(told) == 2

    # Unregistered, the listener hears nothing of a third end.
    notifier.unregister_listener()
    again.close()
    group.reset_to(sm.head_cut(scope, stream))
    assert notifier.check() is None
    third = group.create_reader("r")
    assert len(drain(third)) == 20
    assert notifier.check() == EndOfDataNotification()
    assert len(told) == 2
    third.close()
    group.close()


def test_aio_notifiers_run_listeners_on_the_loop(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            scope, stream = "notify-aio", "orders"
            await sm.create_scope(scope)
            await sm.create_stream(scope, stream, initial_segments=1)
            async with await sm.create_writer(scope, stream) as writer:
                for n in range(5):
                    await writer.write_event(b"event %d" % n, routing_key=f"key-{n}")
            await sm.seal_stream(scope, stream)
            group = await sm.create_reader_group("g", scope, stream)
            loop_thread = threading.get_ident()
            counts: list[tuple[SegmentNotification, int]] = []
            ended = asyncio.Event()

            async def none_left() -> None:  # until the count reaches 0: every segment read
                while not counts or counts[-1][0].number_of_segments > 0:
                    await asyncio.sleep(0.02)

            async def on_end(notification: EndOfDataNotification) -> None:  # a coroutine listener
                assert threading.get_ident() == loop_thread
                ended.set()

            group.segment_notifier(interval=0.05).register_listener(
                lambda n: counts.append((n, threading.get_ident())))  # a plain one, called on the loop
            group.end_of_data_notifier(interval=0.05).register_listener(on_end)
            async with await group.create_reader("r") as reader:
                read = 0
                while await reader.read_next_event(timeout=1.0) is not None:
                    read += 1
                assert read == 5
                await asyncio.wait_for(ended.wait(), 30)
                await asyncio.wait_for(none_left(), 30)
            assert counts[0][0].number_of_segments == 1
            assert {thread for _, thread in counts} == {loop_thread}
            await group.close()

    asyncio.run(main())
