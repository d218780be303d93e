"""Subscribers' retention cuts and consumption-based retention in the controller: the stream is
truncated at the lower bound of the subscribers' cuts, never past one, also across a scale (and a
Hypothesis model of the bound over random cuts of a stream that split)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millrace.protocol.errors import ContainerOfflineError
from millrace.store.controller import (
    Controller,
    InvalidStreamCutError,
    RetentionPolicy,
    StreamConfiguration,
    segment_id,
)
from millrace.store.controller.records import SegmentRange
from millrace.store.controller.subscribers import Subscribers, lower_bound
from millrace.store.errors import StreamNotFoundError
from millrace.store.tables import TableStore
from tests.tables.harness import StoreHarness

CONSUMPTION = StreamConfiguration(initial_segments=2, retention=RetentionPolicy.by_consumption())


def fill(harness: StoreHarness, controller: Controller, scope: str, stream: str, size: int = 100) -> None:
    for seg in controller.get_current_segments(scope, stream):
        harness.store.append(seg.name, b"x" * size).result()


def test_truncates_at_the_lowest_subscriber_cut(harness: StoreHarness, controller: Controller) -> None:
    controller.create_scope("sc")
    controller.create_stream("sc", "s", CONSUMPTION)
    a, b = controller.get_current_segments("sc", "s")
    fill(harness, controller, "sc", "s")
    subscribers = Subscribers(controller)
    assert subscribers.enforce("sc", "s") is None  # no subscriber: everything stays
    subscribers.update("sc", "s", "sc/one", {a.name: 60, b.name: 20})
    subscribers.update("sc", "s", "sc/two", {a.segment_id: 30, b.segment_id: 80})
    assert subscribers.cuts("sc", "s") == {"sc/one": {a.segment_id: 60, b.segment_id: 20},
                                           "sc/two": {a.segment_id: 30, b.segment_id: 80}}
    assert subscribers.enforce("sc", "s") == {a.segment_id: 30, b.segment_id: 20}
    assert controller.get_stream("sc", "s").truncation == {a.segment_id: 30, b.segment_id: 20}
    assert harness.store.get_info(a.name).start_offset == 30
    assert subscribers.enforce("sc", "s") is None  # there already

    subscribers.update("sc", "s", "sc/two", None)  # gone: only one holds back now
    assert subscribers.enforce("sc", "s") == {a.segment_id: 60, b.segment_id: 20}

    with pytest.raises(InvalidStreamCutError):
        subscribers.update("sc", "s", "sc/one", {a.segment_id: 10})  # half the key space
    with pytest.raises(InvalidStreamCutError):
        subscribers.update("sc", "s", "sc/one", {"other/s/0.#epoch.0": 1, b.name: 1})
    with pytest.raises(StreamNotFoundError):
        subscribers.update("sc", "nope", "sc/one", {a.segment_id: 10})

    controller.create_stream("sc", "timed", StreamConfiguration(initial_segments=1))
    (only,) = controller.get_current_segments("sc", "timed")
    fill(harness, controller, "sc", "timed")
    subscribers.update("sc", "timed", "sc/one", {only.segment_id: 50})
    assert subscribers.enforce("sc", "timed") is None  # not a consumption policy: not ours to truncate
    assert controller.get_stream("sc", "timed").truncation == {}

    subscribers.forget_stream("sc", "s")
    assert subscribers.cuts("sc", "s") == {}


class _TruncationFails:
    """The real segment store, except that truncating ``segment`` fails, as when its container goes
    offline in the middle of a retention round."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.segment = ""

    def truncate(self, name: str, offset: int) -> Any:
        if name == self.segment:
            raise ContainerOfflineError(f"{name}'s container is offline")
        return self.store.truncate(name, offset)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.store, attribute)


def test_a_truncation_cut_short_is_completed_by_the_next_round(harness: StoreHarness) -> None:
    """The stream's record names the new head before its segments are truncated: a round that fails in
    between leaves segments behind that head, and a later round, this controller's or a successor's,
    truncates them although the recorded cut is already the subscribers' bound."""
    store = _TruncationFails(harness.store)
    controller = Controller(store, TableStore(harness.store))  # type: ignore[arg-type] - the store, wrapped
    controller.create_scope("sc")
    controller.create_stream("sc", "s", CONSUMPTION)
    a, b = controller.get_current_segments("sc", "s")
    fill(harness, controller, "sc", "s")
    Subscribers(controller).update("sc", "s", "sc/one", {a.segment_id: 30, b.segment_id: 20})
    store.segment = b.name
    with pytest.raises(ContainerOfflineError):
        Subscribers(controller).enforce("sc", "s")
    assert controller.get_stream("sc", "s").truncation == {a.segment_id: 30, b.segment_id: 20}
    assert harness.store.get_info(b.name).start_offset == 0
    with pytest.raises(ContainerOfflineError):  # still offline: the next round tries again
        Subscribers(controller).enforce("sc", "s")

    # The controller fails over to a new process (one that never saw the round cut short).
    successor = Controller(harness.store, TableStore(harness.store))
    assert Subscribers(successor).enforce("sc", "s") == {a.segment_id: 30, b.segment_id: 20}
    assert [harness.store.get_info(s.name).start_offset for s in (a, b)] == [30, 20]
    assert Subscribers(successor).enforce("sc", "s") is None  # done: nothing more to do


def test_lower_bound_across_a_scale(harness: StoreHarness, controller: Controller) -> None:
    """A subscriber still in a segment that split holds the whole segment back, whatever others
    released in its successors."""
    controller.create_scope("sc")
    controller.create_stream("sc", "s", CONSUMPTION)
    a, b = controller.get_current_segments("sc", "s")
    fill(harness, controller, "sc", "s")
    controller.split_segment("sc", "s", a.segment_id, [a.key_end / 2])
    a1, a2 = [s for s in controller.get_current_segments("sc", "s") if s.segment_id != b.segment_id]
    fill(harness, controller, "sc", "s", 50)
    known = {r.segment_id: r for e in controller.get_epoch_history("sc", "s") for r in e.ranges("sc", "s")}

    behind = {a.segment_id: 40, b.segment_id: 90}
    ahead = {a1.segment_id: 10, a2.segment_id: 20, b.segment_id: 70}
    assert lower_bound([behind, ahead], known) == {a.segment_id: 40, b.segment_id: 70}
    assert lower_bound([ahead], known) == ahead
    # A cut naming an unknown segment, or cuts that cannot combine into one, release nothing.
    assert lower_bound([{999: 0}], known) is None
    assert lower_bound([{a1.segment_id: 0, b.segment_id: 0}], known) is None

    subscribers = Subscribers(controller)
    subscribers.update("sc", "s", "sc/behind", behind)
    subscribers.update("sc", "s", "sc/ahead", ahead)
    assert subscribers.enforce("sc", "s") == {a.segment_id: 40, b.segment_id: 70}
    subscribers.update("sc", "s", "sc/behind", {a1.segment_id: 30, a2.segment_id: 5, b.segment_id: 95})
    assert subscribers.enforce("sc", "s") == {a1.segment_id: 10, a2.segment_id: 5, b.segment_id: 70}
    assert harness.store.get_info(a1.name).start_offset == 10


@st.composite
def subscriber_cuts(draw: st.DrawFn) -> tuple[dict[int, SegmentRange], list[dict[int, int]]]:
    """A stream of ``n`` segments of which some split once (epoch 1), and cuts of it: each segment
    that split is cut either in itself or in both its successors."""
    n = draw(st.integers(1, 4))
    known: dict[int, SegmentRange] = {}
    split: dict[int, tuple[int, int]] = {}
    for i in range(n):
        lo, hi = i / n, (i + 1) / n
        known[i] = SegmentRange("sc", "s", i, lo, hi)
        if draw(st.booleans()):
            left, right = segment_id(n + 2 * i, 1), segment_id(n + 2 * i + 1, 1)
            known[left] = SegmentRange("sc", "s", left, lo, (lo + hi) / 2)
            known[right] = SegmentRange("sc", "s", right, (lo + hi) / 2, hi)
            split[i] = (left, right)
    cuts = []
    for _ in range(draw(st.integers(1, 4))):
        cut: dict[int, int] = {}
        for i in range(n):
            if i in split and draw(st.booleans()):
                for successor in split[i]:
                    cut[successor] = draw(st.integers(0, 100))
            else:
                cut[i] = draw(st.integers(0, 100))
        cuts.append(cut)
    return known, cuts


@given(subscriber_cuts())
def test_the_lower_bound_lies_at_or_before_every_cut(case: tuple[dict[int, SegmentRange], list[dict[int, int]]]) -> None:
    """Model: the bound covers the key space once and, wherever it meets a subscriber's cut, lies in
    the same segment at or before its offset, or in an older segment (one the cut's lies after)."""
    known, cuts = case
    bound = lower_bound(cuts, known)
    assert bound is not None
    assert sum(known[s].key_end - known[s].key_start for s in bound) == pytest.approx(1.0)
    for cut in cuts:
        for sid, offset in bound.items():
            for cid, coffset in cut.items():
                if not known[sid].overlaps(known[cid]):
                    continue
                if sid == cid:
                    assert offset <= coffset
                else:
                    assert sid >> 32 < cid >> 32  # the cut's segment is a successor of the bound's
    # The lowest possible: a cut given by every subscriber is the bound itself.
    assert lower_bound([cuts[0]], known) == cuts[0]


def test_an_update_waits_for_the_round_that_read_the_cuts_before_it(harness: StoreHarness,
                                                                   controller: Controller) -> None:
    """A subscriber moving its cut back (a reset backwards) while a retention round is between reading
    the cuts and truncating: the update returns only once that round is done, so no round truncates
    at the old cut after the update returned (another instance of ``Subscribers``, as the gateway's
    native commands and its retention loop each have their own)."""
    controller.create_scope("sc")
    controller.create_stream("sc", "race", CONSUMPTION)
    a, b = controller.get_current_segments("sc", "race")
    fill(harness, controller, "sc", "race")
    Subscribers(controller).update("sc", "race", "sc/g", {a.segment_id: 50, b.segment_id: 50})
    truncating, go_on = threading.Event(), threading.Event()
    truncate = controller.truncate_stream

    def held_truncate(*args: Any, **kwargs: Any) -> None:
        truncating.set()
        go_on.wait(30)
        truncate(*args, **kwargs)

    controller.truncate_stream = held_truncate  # type: ignore[method-assign]
    round_ = threading.Thread(target=Subscribers(controller).enforce, args=("sc", "race"))
    round_.start()
    assert truncating.wait(30)
    back = threading.Thread(target=Subscribers(controller).update,
                            args=("sc", "race", "sc/g", {a.segment_id: 10, b.segment_id: 10}))
    back.start()
    back.join(0.5)
    assert back.is_alive(), "the update returned while a round was about to truncate at the old cut"
    go_on.set()
    round_.join(30)
    back.join(30)
    controller.truncate_stream = truncate  # type: ignore[method-assign]
    assert controller.get_stream("sc", "race").truncation == {a.segment_id: 50, b.segment_id: 50}
    assert Subscribers(controller).cuts("sc", "race") == {"sc/g": {a.segment_id: 10, b.segment_id: 10}}
