"""A replicated log whose ensemble shrank (no spare) grows back when the dead replica returns, and the
fragments written while it was short are copied onto it: real ``millrace logd`` processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.store.durablelog.fragment_copy import read_range
from millrace.store.durablelog.metadata import LogRecord
from millrace.store.durablelog.replica_rpc import ReplicaRpc
from tests.durablelog.logd_process import Replicas
from tests.durablelog.test_replicated import _owner_dies_with_a_tail_on_one_replica, read_back, wait_until


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    group = Replicas(tmp_path, 3).start()
    try:
        yield group
    finally:
        group.close()


def appended(log: object, prefix: str, count: int) -> list[tuple[int, bytes]]:
    payloads = [f"{prefix}{i}:".encode() * (i % 13 + 1) for i in range(count)]
    futures = [log.append(p) for p in payloads]  # type: ignore[attr-defined]
    return [(f.result(30).sequence, p) for f, p in zip(futures, payloads, strict=True)]


def test_a_shrunk_ensemble_grows_back_when_the_replica_returns_and_gets_what_it_missed(replicas: Replicas) -> None:
    log = replicas.opened(request_timeout=1.0, probe_interval=0.2)
    acked = appended(log, "a", 200)
    victim, *never_died = log.record.fragments[-1].ensemble
    replicas.by_address(victim).kill()
    acked += appended(log, "b", 200)  # two acks still make the quorum
    wait_until(lambda: len(log.record.fragments[-1].ensemble) == 2, timeout=15)  # no spare: it shrank
    shrunk_first = log.record.fragments[-1].first
    acked += appended(log, "c", 300)  # written to two replicas only
    replicas.by_address(victim).start()  # same port, same data dir
    started = time.monotonic()

    def grown(record: LogRecord) -> bool:
        return all(len(f.ensemble) == 3 for f in record.fragments)

    wait_until(lambda: grown(log.record), timeout=15)
    regrown_after = time.monotonic() - started
    record = log.record
    shrunk = [f for f in record.fragments if f.first == shrunk_first]
    assert len(shrunk) == 1 and victim in shrunk[0].ensemble  # closed, and now recorded on the victim too
    assert record.fragments[-1].first > shrunk_first and victim in record.fragments[-1].ensemble
    assert log.growths == 1
    acked += appended(log, "d", 100)  # to three replicas again
    log.close()
    print(f"ensemble back to 3 replicas {regrown_after:.2f} s after the logd restarted; "
          f"fragments {[(f.first, len(f.ensemble)) for f in record.fragments]}")

    # The returned replica alone holds the whole log up to the last closed fragment, with each
    # fragment's epoch and a good CRC: what it held before, topped up, plus the short fragments.
    rpc = ReplicaRpc()
    try:
        closed_end = record.fragments[-1].first - 1
        alone = [(s, p) for index, fragment in enumerate(record.fragments[:-1])
                 for s, p, _ in read_range(rpc, "log", fragment, [victim], fragment.first,
                                           record.fragment_end(index, 0), 5.0)]
    finally:
        rpc.close()
    assert alone == [item for item in acked if item[0] <= closed_end]

    # A replica that never died fails now: everything acknowledged is read back, in order.
    replicas.by_address(never_died[0]).kill()
    assert read_back(replicas) == acked


def test_a_returned_replica_holding_a_dropped_tail_joins_and_never_shows_it(replicas: Replicas) -> None:
    owner, holder = _owner_dies_with_a_tail_on_one_replica(replicas)  # 1-5 acked, 6 "unacked" on holder only
    replicas.by_address(holder).kill()
    recovered = replicas.opened(request_timeout=1.0, probe_interval=0.2)  # drops 6; two replicas answer
    assert len(recovered.record.fragments[-1].ensemble) == 2
    assert [e.payload for e in recovered.read_all()] == [f"acked{i}".encode() for i in range(5)]
    assert recovered.append(b"new6").result(30).sequence == 6
    replicas.by_address(holder).start()  # still holding the old owner's entry 6
    wait_until(lambda: all(len(f.ensemble) == 3 for f in recovered.record.fragments), timeout=15)
    assert recovered.append(b"new7").result(30).sequence == 7
    record = recovered.record
    recovered.close()
    rpc = ReplicaRpc()
    try:  # the fragment holding 6 was copied onto the returned replica over its stale entry
        (index,) = (i for i, f in enumerate(record.fragments) if f.first <= 6 <= record.fragment_end(i, 7))
        assert [p for _, p, _ in read_range(rpc, "log", record.fragments[index], [holder], 6, 6, 5.0)] == [b"new6"]
    finally:
        rpc.close()
    replicas.by_address(next(a for a in replicas.addresses if a != holder)).kill()
    expected = [(i + 1, f"acked{i}".encode()) for i in range(5)] + [(6, b"new6"), (7, b"new7")]
    assert read_back(replicas) == expected
    del owner
