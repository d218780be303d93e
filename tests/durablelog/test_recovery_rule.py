"""Hypothesis: the replicated log's recovery rule over random replica histories.

Each round an owner opens the log (fencing a random quorum of the last fragment's replicas, taking
the recovered end from them, copying the tail onto them, recording its fragment), then appends
entries that reach each replica of its ensemble as a random prefix before the owner dies; a zombie
of the previous epoch may append too. The replicas are the logd's own ``LogState`` with its prefix
rule, the metadata the real ``LogRecord``, and the rule the real ``fence_quorum``/``recovery_end``.
After every round a reader reads the log the way ``read_all`` does. Checked: every acknowledged entry
is read with its value; a sequence once read never changes; an entry a recovery dropped is never
read; a zombie never gathers an ack quorum.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from millrace.store.durablelog.metadata import Fragment, LogRecord
from millrace.store.durablelog.replicated_recovery import fence_quorum, recovery_end
from millrace.store.logd.journal import LogState, StoredEntry

Value = tuple[int, int]  # (entry epoch, sequence): what the entry "says"


def hold(state: LogState, sequence: int, epoch: int, first: int) -> bool:
    """The logd's acceptance rule for one entry (fence checked by the caller)."""
    previous = state.entries.get(sequence - 1)
    if not (sequence == first or sequence - 1 <= state.truncated or (previous and previous.entry_epoch == epoch)):
        return False
    existing = state.entries.get(sequence)
    if existing is not None and existing.entry_epoch > epoch:
        return False
    state.entries[sequence] = StoredEntry(epoch, 0, 0, 0, sequence)
    return True


def read(record: LogRecord, replicas: dict[str, LogState], end: int) -> dict[int, Value]:
    """What read_all returns: each fragment's range from any of its replicas holding the fragment's epoch."""
    out: dict[int, Value] = {}
    for index, fragment in enumerate(record.fragments):
        for sequence in range(max(fragment.first, record.truncated + 1), record.fragment_end(index, end) + 1):
            holders = [replicas[a].entries.get(sequence) for a in fragment.ensemble]
            found = [h for h in holders if h is not None and h.entry_epoch == fragment.epoch]
            assert found, f"entry {sequence} of epoch {fragment.epoch} is on no replica of its fragment"
            out[sequence] = (fragment.epoch, sequence)
    return out


@settings(max_examples=400, deadline=None)
@given(data=st.data(), ack_quorum=st.integers(1, 3), extra=st.integers(0, 2), rounds=st.integers(1, 5))
def test_recovery_never_loses_an_acknowledged_entry_nor_shows_a_dropped_one(
        data: st.DataObject, ack_quorum: int, extra: int, rounds: int) -> None:
    write_quorum = ack_quorum + extra
    pool = [f"r{i}" for i in range(write_quorum + 1)]
    replicas = {a: LogState() for a in pool}
    record = LogRecord()
    acknowledged: dict[int, Value] = {}
    seen: dict[int, Value] = {}
    dropped: set[Value] = set()
    for epoch in range(1, rounds + 2):
        # -- a new owner opens: fence a quorum of the last fragment, recover, record its fragment
        last = record.fragments[-1] if record.fragments else None
        if last is None:
            end, responders = 0, []
        else:
            members = list(last.ensemble)
            responders = data.draw(st.lists(st.sampled_from(members), unique=True,
                                            min_size=fence_quorum(len(members), ack_quorum)))
            for a in responders:
                replicas[a].fenced = epoch
            held = {a: replicas[a].prefix_end(last.first, last.epoch) for a in responders}
            end = recovery_end(last.first, record.truncated, held.values())
            for a in responders:  # the tail copied onto every responder, from one that has it
                for sequence in range(held[a] + 1, end + 1):
                    assert any(replicas[b].entries.get(sequence) is not None
                               and replicas[b].entries[sequence].entry_epoch == last.epoch for b in responders)
                    assert hold(replicas[a], sequence, last.epoch, last.first)
            for state in replicas.values():
                dropped.update((last.epoch, s) for s, e in state.entries.items() if e.entry_epoch == last.epoch
                               and s > end)
            # A zombie of the last epoch appends once more: only unfenced replicas may take it.
            zombie_takers = [a for a in members if replicas[a].fenced <= last.epoch
                             and data.draw(st.booleans()) and hold(replicas[a], end + 1, last.epoch, last.first)]
            assert len(zombie_takers) < ack_quorum
            dropped.update((last.epoch, end + 1) for _ in zombie_takers)
        alive = [a for a in pool if a not in responders]
        ensemble = (responders + data.draw(st.permutations(alive)))[:write_quorum]
        record = record.with_fragment(Fragment(epoch, end + 1, tuple(ensemble)))
        record = LogRecord(epoch, record.truncated, record.fragments, record.version)

        # -- a reader now: acknowledged entries all there, nothing read before changed, nothing dropped shown
        visible = read(record, replicas, end)
        assert sorted(visible) == list(range(record.truncated + 1, end + 1))
        for sequence, value in acknowledged.items():
            assert visible[sequence] == value
        for sequence, value in visible.items():
            assert seen.setdefault(sequence, value) == value
            assert value not in dropped
        if epoch == rounds + 1:
            break

        # -- the owner appends; each replica gets a prefix of the entries before the owner dies
        count = data.draw(st.integers(0, 6))
        reached = {a: data.draw(st.integers(0, count)) for a in ensemble}
        for a, n in reached.items():
            for sequence in range(end + 1, end + 1 + n):
                assert hold(replicas[a], sequence, epoch, end + 1)
        by_quorum = sorted(reached.values(), reverse=True)[ack_quorum - 1]
        for sequence in range(end + 1, end + 1 + by_quorum):
            acknowledged[sequence] = (epoch, sequence)
