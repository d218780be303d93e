"""The reader-group state model (protocol/reader_group_state.py) driven by hypothesis: readers join,
read, go offline (with their exact position, or failing with none), segments split and merge while
events are written, checkpoints are taken and the group is reset to them.

The simulated application keeps what it has processed and, at a reset, goes back to what it had
processed at the checkpoint (as a Pravega application restores its checkpointed state). Checked:
a segment is read only by its holder; the frontier covers every stream's key space exactly once;
a successor is read only after all its predecessors' events; per-key order; every completed
checkpoint's cut covers the key space exactly once and splits the events exactly where each reader
returned its checkpoint; and, when readers keep reading, every event is read (exactly once unless a
reader failed without a position, then at least once).

Bounded reads (``BoundedReaderGroupMachine``): a history of writes and scales comes first, the group
is created with an end cut of each stream taken somewhere in it, and the world goes on. Also checked:
no event at or past the end cut is ever read, the group's read is complete only once everything before
the end cut was read, and when readers keep reading it completes with exactly what lies before it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from millrace.protocol import reader_group_state as rgs
from millrace.protocol.names import segment_name
from millrace.protocol.reader_group_state import ReaderGroupState, SegmentPosition

SCOPE = "m"
STREAMS = ["a", "b"]
READERS = [f"r{i}" for i in range(4)]
KEYS = 8  # routing keys per stream; key k hashes to (2k + 1) / 16

Event = tuple[str, int, int]  # stream, key, sequence number


@dataclass
class Seg:
    name: str
    stream: str
    lo: Fraction
    hi: Fraction
    preds: list[str] = field(default_factory=list)
    succs: list[str] = field(default_factory=list)
    batches: list[list[Event]] = field(default_factory=list)
    sealed: bool = False


@dataclass
class Reader:
    generation: int
    local: dict[str, SegmentPosition] = field(default_factory=dict)  # what it has really read


@dataclass
class Checkpoint:
    started: int  # log length when it was initiated
    waiting: set[str]
    marks: dict[str, int] = field(default_factory=dict)  # reader -> log length at its checkpoint


class ReaderGroupMachine(RuleBasedStateMachine):
    failures_allowed = False

    def __init__(self) -> None:
        super().__init__()
        self.segs: dict[str, Seg] = {}
        self.epoch = {s: 0 for s in STREAMS}
        self.numbers = {s: 0 for s in STREAMS}
        self.seq = Counter[tuple[str, int]]()
        for stream, count in zip(STREAMS, (2, 1), strict=True):
            for i in range(count):
                self._new_segment(stream, Fraction(i, count), Fraction(i + 1, count), [])
        start = {name: SegmentPosition(0) for name in self.segs}
        self.state = rgs.initial_state([f"{SCOPE}/{s}" for s in STREAMS], start)
        self.readers: dict[str, Reader] = {}
        self.history: list[ReaderGroupState] = []  # earlier states, for updates decided on stale ones
        self.log: list[tuple[Event, str]] = []  # what the application processed, in order
        self.lossy = False  # a reader failed without a position: duplicates are allowed from then on
        self.checkpoints: dict[str, Checkpoint] = {}
        # completed checkpoint -> its cut and what the application had processed before it
        self.completed: dict[str, tuple[dict[str, SegmentPosition], list[tuple[Event, str]]]] = {}
        self.checkpoint_number = 0

    # -- the world -----------------------------------------------------------------------------------
    def _new_segment(self, stream: str, lo: Fraction, hi: Fraction, preds: list[str]) -> str:
        name = segment_name(SCOPE, stream, (self.epoch[stream] << 32) | self.numbers[stream])
        self.numbers[stream] += 1
        self.segs[name] = Seg(name, stream, lo, hi, list(preds))
        for p in preds:
            self.segs[p].succs.append(name)
        return name

    def _open(self, stream: str) -> list[Seg]:
        return sorted((s for s in self.segs.values() if s.stream == stream and not s.sealed), key=lambda s: s.lo)

    def _apply(self, update: rgs.Update) -> None:
        self.history = [*self.history[-7:], self.state]
        self.state = rgs.apply(self.state, update)
        self._note_checkpoints()

    @rule(stream=st.sampled_from(STREAMS), key=st.integers(0, KEYS - 1), sizes=st.lists(st.integers(1, 3), max_size=3))
    def write(self, stream: str, key: int, sizes: list[int]) -> None:
        point = Fraction(2 * key + 1, 2 * KEYS)
        seg = next(s for s in self._open(stream) if s.lo <= point < s.hi)
        for size in sizes:
            batch = []
            for _ in range(size):
                self.seq[(stream, key)] += 1
                batch.append((stream, key, self.seq[(stream, key)]))
            seg.batches.append(batch)

    @rule(stream=st.sampled_from(STREAMS), index=st.integers(0, 7))
    def split(self, stream: str, index: int) -> None:
        open_segs = self._open(stream)
        seg = open_segs[index % len(open_segs)]
        if seg.hi - seg.lo < Fraction(1, 8):
            return
        self.epoch[stream] += 1
        mid = (seg.lo + seg.hi) / 2
        self._new_segment(stream, seg.lo, mid, [seg.name])
        self._new_segment(stream, mid, seg.hi, [seg.name])
        seg.sealed = True

    @rule(stream=st.sampled_from(STREAMS), index=st.integers(0, 7))
    def merge(self, stream: str, index: int) -> None:
        open_segs = self._open(stream)
        if len(open_segs) < 2:
            return
        left = index % (len(open_segs) - 1)
        pair = open_segs[left:left + 2]
        self.epoch[stream] += 1
        self._new_segment(stream, pair[0].lo, pair[1].hi, [pair[0].name, pair[1].name])
        for seg in pair:
            seg.sealed = True

    # -- readers -------------------------------------------------------------------------------------
    @rule(reader=st.sampled_from(READERS))
    def join(self, reader: str) -> None:
        if reader in self.state.readers:
            return
        self._apply(rgs.add_reader(reader))
        self.readers[reader] = Reader(self.state.generation)

    @rule(reader=st.sampled_from(READERS))
    def go_offline_with_position(self, reader: str) -> None:
        if reader not in self.state.readers:
            return
        self._apply(rgs.remove_reader(reader, self._sync(reader).local))
        del self.readers[reader]

    @precondition(lambda self: self.failures_allowed)
    @rule(reader=st.sampled_from(READERS))
    def fail(self, reader: str) -> None:
        """The reader dies; someone declares it offline without a position (at-least-once)."""
        if reader not in self.state.readers:
            return
        self.lossy = True
        self._apply(rgs.remove_reader(reader, None))
        del self.readers[reader]

    @rule(reader=st.sampled_from(READERS))
    def record(self, reader: str) -> None:
        if reader in self.state.readers:
            r = self._sync(reader)
            self._apply(rgs.record_positions(reader, r.generation, r.local))

    @rule(reader=st.sampled_from(READERS), choice=st.integers(0, 15), steps=st.integers(1, 6))
    def read(self, reader: str, choice: int, steps: int) -> None:
        for _ in range(steps):
            if reader in self.state.readers:
                self._step(reader, choice)

    @rule(reader=st.sampled_from(READERS), age=st.integers(1, 8))
    def stale_update(self, reader: str, age: int) -> None:
        """An update decided on an older state (and generation) is applied to the current one: it
        must change nothing it no longer may."""
        if reader not in self.state.readers or not self.history:
            return
        old, r = self.history[-min(age, len(self.history))], self._sync(reader)
        release = rgs.segment_to_release(old, reader)
        if release is not None and release in r.local:
            self._apply(rgs.release(reader, old.generation, release, r.local[release]))
            if release not in self.state.readers[reader]:
                del r.local[release]
        else:
            self._apply(rgs.acquire(reader, old.generation, rgs.segments_to_acquire(old, reader)))
        self._sync(reader)

    def _sync(self, reader: str) -> Reader:
        """What a reader does after fetching the state: follow a reset, open what it acquired."""
        r = self.readers[reader]
        held = self.state.readers[reader]
        if r.generation != self.state.generation:
            r.generation, r.local = self.state.generation, {}
        assert set(r.local) <= set(held), "a reader lost a segment it did not give up"
        for key, pos in held.items():
            r.local.setdefault(key, pos)
        return r

    def _step(self, reader: str, choice: int) -> bool:
        """One call of read_next_event's loop: checkpoint, rebalance, read or complete. True if it did
        something."""
        r = self._sync(reader)
        checkpoint = self.state.checkpoint_for(reader)
        if checkpoint is not None:
            mid_batch = sorted(k for k, p in r.local.items() if p.skip)
            if mid_batch:
                return self._deliver(reader, r, mid_batch[0])
            self._apply(rgs.checkpoint_reader(reader, r.generation, checkpoint, r.local))
            return True
        release = rgs.segment_to_release(self.state, reader)
        if release is not None:
            self._apply(rgs.release(reader, r.generation, release, r.local.pop(release)))
            return True
        acquire = rgs.segments_to_acquire(self.state, reader)
        if acquire:
            self._apply(rgs.acquire(reader, r.generation, acquire))
            self._sync(reader)
            return True
        if not r.local:
            return False
        keys = sorted(r.local)
        for key in keys[choice % len(keys):] + keys[:choice % len(keys)]:
            seg, pos = self.segs[key], r.local[key]
            end = self.state.end[key].offset if key in self.state.end else None
            if pos.offset < (len(seg.batches) if end is None else min(end, len(seg.batches))):
                return self._deliver(reader, r, key)
            if seg.sealed or (end is not None and pos.offset >= end):
                successors = {s: self.segs[s].preds for s in seg.succs}
                self._apply(rgs.complete_segment(reader, r.generation, key, pos.offset, successors))
                del r.local[key]
                return True
        return False

    def _deliver(self, reader: str, r: Reader, key: str) -> bool:
        seg, pos = self.segs[key], r.local[key]
        assert self.state.holder(key) == reader, f"{reader} reads {key} held by {self.state.holder(key)}"
        processed = {e for e, _ in self.log}
        for pred in seg.preds:
            unread = [e for b in self.segs[pred].batches for e in b if e not in processed]
            assert not unread, f"{key} read before its predecessor {pred} was finished: {unread}"
        batch = seg.batches[pos.offset]
        event = batch[pos.skip]
        assert event not in self._past_end(), f"{event} of {key} read past the end cut"
        r.local[key] = SegmentPosition(pos.offset + 1) if pos.skip + 1 == len(batch) else \
            SegmentPosition(pos.offset, pos.skip + 1)
        if not self.lossy:
            stream, k, seq = event
            last = max((e[2] for e, _ in self.log if e[:2] == (stream, k)), default=0)
            assert seq == last + 1, f"key {stream}/{k}: {seq} after {last}"
        self.log.append((event, reader))
        return True

    def _past_end(self) -> set[Event]:
        """The events at or past the group's end cut (none in an unbounded group)."""
        end = self.state.end
        past = {e for k in self._descendants(end.keys()) for b in self.segs[k].batches for e in b}
        return past | {e for k, p in end.items() for b in self.segs[k].batches[p.offset:] for e in b}

    # -- checkpoints ----------------------------------------------------------------------------------
    @rule(silent=st.booleans())
    def initiate_checkpoint(self, silent: bool) -> None:
        """``silent``: generate_stream_cuts' kind, which readers record without returning an event
        (the state treats both alike)."""
        if len(self.state.checkpoints) >= rgs.MAX_PENDING_CHECKPOINTS:
            return
        self.checkpoint_number += 1
        name = f"cp{self.checkpoint_number}"
        self.checkpoints[name] = Checkpoint(len(self.log), set(self.state.readers))
        self._apply(rgs.create_checkpoint(name, silent))

    @rule()
    def cancel_checkpoints(self) -> None:
        if self.state.checkpoints:
            self._apply(rgs.cancel_checkpoints())

    def _note_checkpoints(self) -> None:
        """Mark where each waiting reader checkpointed (or left), and check completed checkpoints."""
        pending = {c.name: set(c.waiting) for c in self.state.checkpoints}
        for name, cp in list(self.checkpoints.items()):
            for reader in cp.waiting - pending.get(name, set()) - set(cp.marks):
                cp.marks[reader] = len(self.log)
            if name in self.state.completed_checkpoints:
                del self.checkpoints[name]
                before = [entry for i, entry in enumerate(self.log)
                          if i < cp.started or (entry[1] in cp.marks and i < cp.marks[entry[1]])]
                self.completed[name] = (dict(self.state.completed_checkpoints[name]), before)
                self._check_cut(name, before)
                event("checkpoint completed")
            elif name not in pending:
                del self.checkpoints[name]  # dropped by a reset or cancelled

    def _check_cut(self, name: str, before: list[tuple[Event, str]]) -> None:
        cut = self.state.completed_checkpoints[name]
        self._check_cover(cut.keys(), f"checkpoint {name}")
        if self.lossy:
            return
        after = self._descendants(cut.keys())
        expected = []
        for seg in self.segs.values():
            if seg.name in cut:
                pos = cut[seg.name]
                for b, batch in enumerate(seg.batches):
                    expected += [e for i, e in enumerate(batch) if (b, i) < (pos.offset, pos.skip)]
            elif seg.name not in after:
                expected += [e for batch in seg.batches for e in batch]
        assert Counter(expected) == Counter(e for e, _ in before), f"checkpoint {name} does not split the events"

    def _descendants(self, keys: object) -> set[str]:
        out: set[str] = set()
        todo = [s for k in keys for s in self.segs[k].succs]  # type: ignore[attr-defined]
        while todo:
            k = todo.pop()
            if k not in out:
                out.add(k)
                todo.extend(self.segs[k].succs)
        return out

    @rule(index=st.integers(0, 20))
    def reset_to_checkpoint(self, index: int) -> None:
        if not self.completed:
            return
        event("reset to a checkpoint")
        names = sorted(self.completed)
        cut, before = self.completed[names[index % len(names)]]
        self._apply(rgs.reset(self.state.streams, cut))
        assert not self.state.readers, "a reset leaves readers online"
        self.readers = {}  # every reader must be created again (ReinitializationRequired)
        self.log = list(before)  # the application goes back to its checkpointed state

    # -- invariants -------------------------------------------------------------------------------------
    def _check_cover(self, keys: object, what: str) -> None:
        for stream in STREAMS:
            ranges = sorted((self.segs[k].lo, self.segs[k].hi) for k in keys  # type: ignore[attr-defined]
                            if self.segs[k].stream == stream)
            edge = Fraction(0)
            for lo, hi in ranges:
                assert lo == edge, f"{what}: {stream} has a gap or overlap at {edge}: {ranges}"
                edge = hi
            assert edge == 1, f"{what}: {stream} ends at {edge}"

    @invariant()
    def one_place_per_segment(self) -> None:
        places = [k for held in self.state.readers.values() for k in held]
        places += list(self.state.unassigned) + list(self.state.future)
        assert len(places) == len(set(places)), places

    @invariant()
    def frontier_covers_key_space(self) -> None:
        self._check_cover(self.state.frontier().keys(), "frontier")

    @invariant()
    def state_survives_json(self) -> None:
        assert ReaderGroupState.from_json(self.state.to_json()) == self.state

    @invariant()
    def complete_only_when_all_read(self) -> None:
        if self.state.read_completed() and not self.lossy:
            written = {e for seg in self.segs.values() for batch in seg.batches for e in batch}
            assert written - self._past_end() <= {e for e, _ in self.log}, "complete with events unread"

    def teardown(self) -> None:
        """Readers keep reading: everything written is read, and only open segments remain."""
        if not self.state.readers:
            self.join(READERS[0])
        for _ in range(10_000):
            if not any(self._step(reader, 0) for reader in list(self.state.readers)):
                break
        else:
            raise AssertionError("the readers never settled")
        written = Counter(e for seg in self.segs.values() for batch in seg.batches for e in batch)
        read = Counter(e for e, _ in self.log)
        assert set(read) == set(written), f"never read: {set(written) - set(read)}"
        if not self.lossy:
            assert read == written, f"read twice: {read - written}"
        assert set(self.state.frontier()) == {s.name for s in self.segs.values() if not s.sealed}
        holdings = [len(held) for held in self.state.readers.values()]
        assert not self.state.unassigned and max(holdings) - min(holdings) <= 1, self.state.readers
        assert not self.state.checkpoints, "a checkpoint never completed"


class FailingReaderGroupMachine(ReaderGroupMachine):
    """Readers also fail and are declared offline without a position: at least once."""

    failures_allowed = True


class BoundedReaderGroupMachine(ReaderGroupMachine):
    """A bounded read: the group reads from the start up to an end cut taken in a history written
    before it was created; the world goes on past the cut."""

    @initialize(steps=st.lists(st.tuples(st.sampled_from(["write", "write", "split", "merge"]),
                                          st.sampled_from(STREAMS), st.integers(0, KEYS - 1),
                                          st.lists(st.integers(1, 3), min_size=1, max_size=3)),
                               min_size=1, max_size=12),
                when=st.lists(st.integers(0, 12), min_size=len(STREAMS), max_size=len(STREAMS)),
                back=st.lists(st.integers(0, 2), min_size=8, max_size=8))
    def history_and_end_cut(self, steps: list[tuple[str, str, int, list[int]]], when: list[int],
                            back: list[int]) -> None:
        """Write and scale, remembering each stream's open segments at every step; the end cut of a
        stream is its open segments at one step (``when`` steps before the last), each some batches
        (``back``) before its length then: a valid cut of the stream as it was then."""
        snapshots: list[dict[str, dict[str, int]]] = []

        def snapshot() -> None:
            snapshots.append({stream: {s.name: len(s.batches) for s in self._open(stream)} for stream in STREAMS})

        snapshot()
        for action, stream, key, sizes in steps:
            if action == "write":
                self.write(stream, key, sizes)
            else:
                getattr(self, action)(stream, key)
            snapshot()
        end: dict[str, SegmentPosition] = {}
        for stream, at in zip(STREAMS, when, strict=True):
            for i, (name, length) in enumerate(sorted(snapshots[-1 - at % len(snapshots)][stream].items())):
                end[name] = SegmentPosition(max(0, length - back[i % len(back)]))
        self.state = rgs.initial_state(self.state.streams, self.state.unassigned, end)

    def teardown(self) -> None:
        """Readers keep reading: the read completes with everything before the end cut read (exactly
        once unless a reader failed), and the frontier is the end cut."""
        if not self.state.readers:
            self.join(READERS[0])
        for _ in range(10_000):
            if not any(self._step(reader, 0) for reader in list(self.state.readers)):
                break
        else:
            raise AssertionError("the readers never settled")
        assert self.state.read_completed()
        past = self._past_end()
        wanted = Counter(e for seg in self.segs.values() for batch in seg.batches for e in batch if e not in past)
        event(f"bounded read: {'some' if wanted else 'no'} events before the end cut, "
              f"{'some' if past else 'none'} past it")
        read = Counter(e for e, _ in self.log)
        assert set(read) == set(wanted), f"never read: {set(wanted) - set(read)}, past the end: {set(read) - set(wanted)}"
        if not self.lossy:
            assert read == wanted, f"read twice: {read - wanted}"
        assert self.state.frontier() == self.state.end
        assert not self.state.checkpoints, "a checkpoint never completed"


ReaderGroupMachine.TestCase.settings = settings(
    max_examples=500, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FailingReaderGroupMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BoundedReaderGroupMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Tens of seconds each on two cores: out of the fast tier.
TestReaderGroupModel = pytest.mark.slow(ReaderGroupMachine.TestCase)
TestReaderGroupModelWithFailures = pytest.mark.slow(FailingReaderGroupMachine.TestCase)
TestReaderGroupModelBoundedReads = pytest.mark.slow(BoundedReaderGroupMachine.TestCase)


def test_fair_share_and_release() -> None:
    """Five segments, three readers: ceil(5/3) = 2 each at most; a reader above it releases one."""
    keys = [segment_name(SCOPE, "a", i) for i in range(5)]
    state = rgs.initial_state([f"{SCOPE}/a"], {k: SegmentPosition(0) for k in keys})
    state = rgs.apply(state, rgs.add_reader("r0"))
    state = rgs.apply(state, rgs.acquire("r0", 0, rgs.segments_to_acquire(state, "r0")))
    assert len(state.readers["r0"]) == 5
    for reader in ("r1", "r2"):
        state = rgs.apply(state, rgs.add_reader(reader))
    assert rgs.segments_to_acquire(state, "r1") == []  # nothing unassigned yet
    for _ in range(3):
        key = rgs.segment_to_release(state, "r0")
        assert key is not None
        state = rgs.apply(state, rgs.release("r0", 0, key, SegmentPosition(7, 1)))
    assert rgs.segment_to_release(state, "r0") is None
    for reader in ("r1", "r2"):
        state = rgs.apply(state, rgs.acquire(reader, 0, rgs.segments_to_acquire(state, reader)))
    assert sorted(len(h) for h in state.readers.values()) == [1, 2, 2]
    assert SegmentPosition(7, 1) in state.readers["r1"].values()  # a released position travels
    # A stale generation changes nothing.
    assert rgs.apply(state, rgs.release("r0", 5, keys[0], SegmentPosition(0))) == state


def test_merge_successor_waits_for_both_predecessors_and_stays_covered() -> None:
    a, b = segment_name(SCOPE, "a", 0), segment_name(SCOPE, "a", 1)
    merged = segment_name(SCOPE, "a", (1 << 32) | 2)
    state = rgs.initial_state([f"{SCOPE}/a"], {a: SegmentPosition(0), b: SegmentPosition(0)})
    state = rgs.apply(state, rgs.add_reader("r0"))
    state = rgs.apply(state, rgs.acquire("r0", 0, [a, b]))
    state = rgs.apply(state, rgs.complete_segment("r0", 0, a, 40, {merged: [a, b]}))
    assert merged not in state.unassigned and state.future == {merged: {a: 40, b: None}}
    state = rgs.apply(state, rgs.create_checkpoint("cp"))
    state = rgs.apply(state, rgs.checkpoint_reader("r0", 0, "cp", {b: SegmentPosition(9)}))
    assert state.completed_checkpoints["cp"] == {a: SegmentPosition(40), b: SegmentPosition(9)}
    state = rgs.apply(state, rgs.complete_segment("r0", 0, b, 50, {merged: [a, b]}))
    assert state.unassigned == {merged: SegmentPosition(0)} and state.future == {}


def test_a_reader_with_a_checkpoint_pending_gives_nothing_up() -> None:
    """Releasing or completing before checkpointing would drop the segment from the cut."""
    a, b = segment_name(SCOPE, "a", 0), segment_name(SCOPE, "a", 1)
    left, right = segment_name(SCOPE, "a", (1 << 32) | 2), segment_name(SCOPE, "a", (1 << 32) | 3)
    state = rgs.initial_state([f"{SCOPE}/a"], {a: SegmentPosition(0), b: SegmentPosition(0)})
    state = rgs.apply(state, rgs.add_reader("r0"))
    state = rgs.apply(state, rgs.acquire("r0", 0, [a, b]))
    state = rgs.apply(state, rgs.create_checkpoint("cp"))
    assert rgs.segment_to_release(rgs.apply(state, rgs.add_reader("r1")), "r0") is None
    assert rgs.apply(state, rgs.release("r0", 0, a, SegmentPosition(3))) == state
    assert rgs.apply(state, rgs.complete_segment("r0", 0, a, 9, {left: [a], right: [a]})) == state
    state = rgs.apply(state, rgs.checkpoint_reader("r0", 0, "cp", {a: SegmentPosition(9), b: SegmentPosition(4)}))
    assert state.completed_checkpoints["cp"] == {a: SegmentPosition(9), b: SegmentPosition(4)}
    state = rgs.apply(state, rgs.complete_segment("r0", 0, a, 9, {left: [a], right: [a]}))
    assert state.unassigned == {left: SegmentPosition(0), right: SegmentPosition(0)}


def test_offline_reader_position_and_checkpoint() -> None:
    """reader_offline with a position resumes exactly there (segments it no longer holds are
    ignored); without one, at the last recorded position; a checkpoint waiting for it completes."""
    a, b, gone = (segment_name(SCOPE, "a", i) for i in range(3))
    state = rgs.initial_state([f"{SCOPE}/a"], {a: SegmentPosition(0), b: SegmentPosition(0)})
    state = rgs.apply(rgs.apply(state, rgs.add_reader("r0")), rgs.add_reader("r1"))
    for reader in ("r0", "r1"):
        state = rgs.apply(state, rgs.acquire(reader, 0, rgs.segments_to_acquire(state, reader)))
    state = rgs.apply(state, rgs.record_positions("r0", 0, {a: SegmentPosition(5)}))
    state = rgs.apply(state, rgs.create_checkpoint("cp"))
    exact = rgs.apply(state, rgs.remove_reader("r0", {a: SegmentPosition(8, 2), gone: SegmentPosition(1)}))
    assert exact.unassigned == {a: SegmentPosition(8, 2)} and exact.checkpoints[0].waiting == ["r1"]
    recorded = rgs.apply(state, rgs.remove_reader("r0", None))
    assert recorded.unassigned == {a: SegmentPosition(5)}
    done = rgs.apply(exact, rgs.checkpoint_reader("r1", 0, "cp", {b: SegmentPosition(3)}))
    assert done.completed_checkpoints["cp"] == {a: SegmentPosition(8, 2), b: SegmentPosition(3)}
    # A position taken before a reset says nothing about segments held after it.
    reset = rgs.apply(state, rgs.reset(state.streams, {a: SegmentPosition(2), b: SegmentPosition(0)}))
    assert reset.readers == {}  # every reader is created again after a reset
    reset = rgs.apply(rgs.apply(reset, rgs.add_reader("r0")), rgs.acquire("r0", 1, [a]))
    stale = rgs.apply(reset, rgs.remove_reader("r0", {a: SegmentPosition(8)}, generation=0))
    assert stale.unassigned[a] == SegmentPosition(2)


def test_generated_cuts_checkpoint_is_forgotten_pending_or_completed() -> None:
    """generate_stream_cuts' silent checkpoint: kept through JSON, dropped by forget whether it is still
    pending (given up) or completed (its cuts taken), leaving the application's own alone."""
    a = segment_name(SCOPE, "a", 0)
    state = rgs.initial_state([f"{SCOPE}/a"], {a: SegmentPosition(0)})
    state = rgs.apply(rgs.apply(state, rgs.add_reader("r0")), rgs.acquire("r0", 0, [a]))
    state = rgs.apply(state, rgs.create_checkpoint("mine"))
    state = rgs.apply(state, rgs.checkpoint_reader("r0", 0, "mine", {a: SegmentPosition(3)}))
    state = rgs.apply(state, rgs.create_checkpoint("_cuts-1", silent=True))
    assert state.checkpoints[0].silent and ReaderGroupState.from_json(state.to_json()) == state
    assert rgs.apply(state, rgs.forget_checkpoint("_cuts-1")).checkpoints == []
    state = rgs.apply(state, rgs.checkpoint_reader("r0", 0, "_cuts-1", {a: SegmentPosition(5)}))
    assert state.completed_checkpoints["_cuts-1"] == {a: SegmentPosition(5)}
    state = rgs.apply(state, rgs.forget_checkpoint("_cuts-1"))
    assert list(state.completed_checkpoints) == ["mine"]
