"""The container's thread model: futures complete outside the container lock, so a callback may
use the container, even from another thread; parked tail reads end exactly once."""

from __future__ import annotations

import threading

import pytest

from millrace.store.errors import SegmentNotFoundError
from millrace.store.futures import StoreFuture
from millrace.store.segment_store import SegmentStore
from tests.storehelpers import open_store


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path), containers=1)
    yield s
    s.close()


def _watch_lock(store: SegmentStore, name: str, fut: StoreFuture) -> tuple[list[bool], threading.Event]:
    """When ``fut`` completes, its callback asks another thread to take the container lock (through
    get_info) and records whether that thread got in. A callback run under the lock would block it."""
    got_in: list[bool] = []
    finished = threading.Event()

    def callback(_: StoreFuture) -> None:
        other = threading.Thread(target=store.get_info, args=(name,), daemon=True)
        other.start()
        other.join(10)
        got_in.append(not other.is_alive())
        finished.set()

    fut.add_done_callback(callback)
    return got_in, finished


def test_appends_and_woken_tail_reads_complete_outside_the_lock(store):
    store.create_segment("t/a").result(5)
    parked = store.read("t/a", 0, 100, wait_timeout=30)
    read_got_in, read_finished = _watch_lock(store, "t/a", parked)
    append = store.append("t/a", b"wake")
    append_got_in, append_finished = _watch_lock(store, "t/a", append)
    assert read_finished.wait(30) and append_finished.wait(30)
    assert read_got_in == [True] and append_got_in == [True]
    assert parked.result(5).data == b"wake"


def test_a_callback_may_call_back_into_the_container(store):
    store.create_segment("t/b").result(5)
    follow_up: list[StoreFuture] = []
    first = store.append("t/b", b"one")
    first.add_done_callback(lambda _: follow_up.append(store.append("t/b", b"two")))
    first.result(5)
    assert follow_up[0].result(5) == 3
    assert store.read("t/b", 0, 10).result(5).data == b"onetwo"


def test_a_parked_read_fails_when_its_segment_is_deleted(store):
    store.create_segment("t/c").result(5)
    parked = store.read("t/c", 0, 100, wait_timeout=30)
    store.delete("t/c").result(5)
    with pytest.raises(SegmentNotFoundError):
        parked.result(5)


def test_a_repeated_seal_answers_once_everything_before_is_durable(store):
    store.create_segment("t/d").result(5)
    store.append("t/d", b"abc")
    first = store.seal("t/d")
    again = store.seal("t/d")  # accepted while the first may still be in flight
    assert again.result(5) == 3 and first.result(5) == 3
    assert store.get_info("t/d").sealed
