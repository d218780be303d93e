"""A replica's copy of an entry whose payload no longer matches its CRC-32C (flipped on disk under a
running ``millrace logd``) is not only skipped by reads: the owner rewrites the good copy onto it, and
a replica whose rewritten copy goes bad again is treated as failing."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from typing import Any, cast

import pytest
from crc32c import crc32c

from millrace.store.durablelog import framing
from millrace.store.durablelog.fragment_copy import read_range
from millrace.store.durablelog.metadata import Fragment
from millrace.store.durablelog.replica_rpc import ReplicaRpc
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.errors import DataCorruptionError
from millrace.store.logd import wire
from tests.durablelog.logd_process import Replicas
from tests.durablelog.test_regrow import appended
from tests.durablelog.test_replicated import wait_until

DAMAGED = 20  # the entry whose copy on one replica is damaged


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    group = Replicas(tmp_path_factory.mktemp("bad-copies"), 3).start()  # shared: each test has its own log
    try:
        yield group
    finally:
        group.close()


def payload_location(journal_dir: str, name: str, sequence: int) -> tuple[str, int, int]:
    """(journal file, byte offset, length) of the newest copy of entry ``sequence`` of log ``name``,
    from the journal format: frames whose payload is ``E, name length u16, name, sequence u64,
    entry epoch u64, crc u32, payload``."""
    found = None
    for file_name in sorted(os.listdir(journal_dir)):
        path = os.path.join(journal_dir, file_name)
        with open(path, "rb") as f:
            data = f.read()
        position = 0
        while position + framing.HEADER_SIZE <= len(data):  # no frame CRC check: a damaged one is read on
            _, length, _, _ = framing.HEADER.unpack_from(data, position)
            start = position + framing.HEADER_SIZE
            end = position = start + length
            if data[start : start + 1] != b"E":
                continue
            (name_len,) = struct.unpack_from("<H", data, start + 1)
            body = start + 3 + name_len
            seq, _, _ = struct.unpack_from("<QQI", data, body)
            if data[start + 3 : body].decode() == name and seq == sequence:
                found = (path, body + 20, end - body - 20)
    assert found is not None, f"entry {sequence} is not in {journal_dir}"
    return found


def damage(journal_dir: str, name: str, sequence: int) -> None:
    """Flip bytes of the entry's payload in place, as a disk might; the logd keeps running."""
    path, offset, length = payload_location(journal_dir, name, sequence)
    fd = os.open(path, os.O_RDWR)
    try:
        original = os.pread(fd, 4, offset + length // 2)
        os.pwrite(fd, bytes(b ^ 0xFF for b in original), offset + length // 2)
    finally:
        os.close(fd)


def read_alone(address: str, name: str, fragment: Fragment, sequence: int) -> bytes:
    rpc = ReplicaRpc()
    try:
        return next(p for _, p, _ in read_range(rpc, name, fragment, [address], sequence, sequence, 5.0))
    finally:
        rpc.close()


def opened_then_damaged(replicas: Replicas,
                        name: str) -> tuple[ReplicatedDurableDataLog, list[tuple[int, bytes]], Fragment, str]:
    """50 entries of log ``name`` by a first owner (closed), then a new owner opened (as a container's
    recovery, which reads everything next); the copy of entry DAMAGED on the replica its reads ask
    first is damaged on disk. Returns (the new owner, the entries, their fragment, that replica)."""
    owner = replicas.opened(name)
    # A logd answering the first open late (under load) joins a moment later: write to all three.
    wait_until(lambda: len(owner.record.fragments[-1].ensemble) == 3, timeout=15)
    acked = appended(owner, "a", 50)
    fragment = owner.record.fragments[-1]
    assert fragment.first == 1
    owner.close()
    # Damage only after the new owner's open: an owner's close waits for an ack quorum, not for the
    # slowest replica, which may still lack entry DAMAGED; recovery brings every fenced replica up.
    log = replicas.opened(name)
    # Reads ask the replicas that answered the open first (one answering late, under load, comes last).
    victim = sorted(fragment.ensemble, key=lambda a: a not in log._reachable)[0]
    damage(replicas.by_address(victim).data_dir, name, DAMAGED)
    return log, acked, fragment, victim


def bad_copy_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "bad copy" in r.getMessage() and r.levelno == logging.WARNING]


def test_a_bad_copy_met_by_a_new_owners_read_is_rewritten_from_a_good_one(replicas: Replicas,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    log, acked, fragment, victim = opened_then_damaged(replicas, "read")
    caplog.set_level(logging.WARNING, logger="millrace.store.durablelog.replicated_repair")
    try:
        # The running logd notices the damage itself and answers it as corrupt instead of sending it.
        rpc = ReplicaRpc()
        try:
            reply = rpc.call_one(victim, {"op": "read", "log": "read", "from": DAMAGED - 1, "to": DAMAGED + 1,
                                          "max_bytes": 1 << 20}, [], 5.0)
        finally:
            rpc.close()
        assert reply is not None and reply[0]["status"] == wire.OK and reply[1] == [dict(acked)[DAMAGED - 1]]
        assert [e[0] for e in reply[0]["entries"]] == [DAMAGED - 1]
        assert reply[0]["corrupt"] == [DAMAGED, fragment.epoch]
        with pytest.raises(DataCorruptionError):
            read_alone(victim, "read", fragment, DAMAGED)
        assert [(e.address.sequence, e.payload) for e in log.read_all()] == acked
        wait_until(lambda: log.repairs == 1, timeout=10)
        assert read_alone(victim, "read", fragment, DAMAGED) == dict(acked)[DAMAGED]  # rewritten, right CRC
        warnings = bad_copy_warnings(caplog)
        assert len(warnings) == 1 and victim in warnings[0] and f"entry {DAMAGED} " in warnings[0]
        assert log.replacements == 0 and victim in log.record.fragments[-1].ensemble  # repaired, not failed
        assert log.append(b"after").result(10).sequence == 51
    finally:
        log.close()


def test_a_replica_whose_rewritten_copy_goes_bad_again_is_treated_as_failing(replicas: Replicas) -> None:
    log, acked, fragment, victim = opened_then_damaged(replicas, "again")
    try:
        assert list(e.payload for e in log.read_all()) == [p for _, p in acked]
        wait_until(lambda: log.repairs == 1, timeout=10)
        damage(replicas.by_address(victim).data_dir, "again", DAMAGED)  # the rewritten copy rots too
        assert list(e.payload for e in log.read_all()) == [p for _, p in acked]
        # Rewritten once more, and the replica is replaced (no spare among three: the ensemble shrinks).
        wait_until(lambda: log.replacements == 1, timeout=10)
        assert log.repairs == 2 and victim not in log.record.fragments[-1].ensemble
        assert log.append(b"after").result(10).sequence == 51  # two replicas still make the ack quorum
    finally:
        log.close()


def test_a_bad_copy_met_while_copying_a_fragment_onto_a_returned_replica_is_rewritten(replicas: Replicas) -> None:
    log = replicas.opened("copy", request_timeout=1.0, probe_interval=0.2)
    dead = None
    try:
        wait_until(lambda: len(log.record.fragments[-1].ensemble) == 3, timeout=15)
        acked = appended(log, "a", 20)
        dead = log.record.fragments[-1].ensemble[2]
        replicas.by_address(dead).kill()
        acked += appended(log, "b", 20)
        wait_until(lambda: len(log.record.fragments[-1].ensemble) == 2, timeout=15)  # no spare: it shrank
        acked += appended(log, "c", 30)
        short = log.record.fragments[-1]  # written to two replicas only; copied onto the third when it returns
        source = short.ensemble[0]  # the copy reads from the fragment's replicas in order
        sequence = short.first + 5
        damage(replicas.by_address(source).data_dir, "copy", sequence)
        replicas.by_address(dead).start()
        wait_until(lambda: all(len(f.ensemble) == 3 for f in log.record.fragments), timeout=15)
        wait_until(lambda: log.repairs == 1, timeout=10)
        payload = dict(acked)[sequence]
        assert read_alone(source, "copy", short, sequence) == payload  # the bad copy, rewritten
        assert read_alone(dead, "copy", short, sequence) == payload  # the returned replica got the good one
        assert log.growths == 1
    finally:
        log.close()
        if dead is not None and replicas.by_address(dead).proc.poll() is not None:  # type: ignore[union-attr]
            replicas.by_address(dead).start()


class _Answers:
    """Stands in for ReplicaRpc: each replica answers reads from a fixed list of (sequence, epoch,
    crc, payload), as a logd would, bad bytes included (damaged on the wire or by an older logd)."""

    def __init__(self, held: dict[str, list[tuple[int, int, int, bytes]]]) -> None:
        self.held = held

    def call_one(self, address: str, header: dict[str, Any], payloads: list[bytes],
                 timeout: float) -> tuple[dict[str, Any], list[bytes]]:
        entries = [e for e in self.held[address] if header["from"] <= e[0] <= header["to"]]
        return ({"status": wire.OK, "entries": [[s, ep, c] for s, ep, c, _ in entries]}, [p for *_, p in entries])


def test_read_range_checks_crcs_itself_and_hands_over_the_good_copy_for_a_bad_one() -> None:
    good = [(s, 1, crc32c(b"e%d" % s), b"e%d" % s) for s in range(1, 6)]
    bad = [(s, ep, c, b"XX" if s == 3 else p) for s, ep, c, p in good]
    rpc = _Answers({"a": bad, "b": good, "c": good})
    met: list[tuple[str, int, bytes, int]] = []
    fragment = Fragment(1, 1, ("a", "b", "c"))
    got = list(read_range(cast(ReplicaRpc, rpc), "log", fragment, ["a", "b", "c"], 1, 5, 1.0,
                          lambda f, address, s, p, c: met.append((address, s, p, c))))
    assert [(s, p) for s, p, _ in got] == [(s, p) for s, _, _, p in good]
    assert met == [("a", 3, b"e3", crc32c(b"e3"))]
    # A copy held with another entry epoch is not a bad copy: just not this fragment's entry.
    other = [(s, 2 if s == 3 else ep, c, p) for s, ep, c, p in bad]
    met.clear()
    rpc.held["a"] = other
    assert len(list(read_range(cast(ReplicaRpc, rpc), "log", fragment, ["a", "b"], 1, 5, 1.0,
                               lambda f, address, s, p, c: met.append((address, s, p, c))))) == 5
    assert met == []
    # No good copy anywhere: the read fails and says where the bad copies are.
    rpc.held["a"] = rpc.held["b"] = bad
    with pytest.raises(DataCorruptionError, match="bad copies on a, b"):
        list(read_range(cast(ReplicaRpc, rpc), "log", fragment, ["a", "b"], 1, 5, 1.0))
