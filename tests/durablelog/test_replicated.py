"""The replicated durable log against real ``millrace logd`` processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
import zmq

from millrace.store.durablelog.interface import LogAddress
from millrace.store.durablelog.replica_rpc import ReplicaRpc, connect_dealer
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.errors import DataLogWriterFencedError
from millrace.store.logd import wire
from tests.durablelog.helpers import payload_for
from tests.durablelog.logd_process import Replicas
from tests.server_process import REPO_ROOT


@pytest.fixture
def replicas(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Replicas]:
    count = getattr(request, "param", 3)
    group = Replicas(tmp_path, count).start()
    try:
        yield group
    finally:
        group.close()


def read_back(group: Replicas, name: str = "log", **kwargs: float) -> list[tuple[int, bytes]]:
    """Open the log as a new owner, read everything, close."""
    log = group.opened(name, **kwargs)
    try:
        return [(e.address.sequence, e.payload) for e in log.read_all()]
    finally:
        log.close()


def wait_until(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_entries_are_acknowledged_by_an_ack_quorum(replicas: Replicas) -> None:
    log = replicas.opened(request_timeout=60.0)  # paused replicas stay members: no replacement here
    first = [log.append(f"a{i}".encode()) for i in range(100)]
    assert [f.result(30).sequence for f in first] == list(range(1, 101))
    ensemble = log.record.fragments[-1].ensemble
    stopped = [replicas.by_address(a) for a in ensemble[:1]]
    stopped[0].pause()  # one of three silent: two acks still make the quorum
    one_down = [log.append(f"b{i}".encode()) for i in range(100)]
    assert [f.result(30).sequence for f in one_down] == list(range(101, 201))
    lag = log.replica_lag()  # the silent one lags by what it missed; the quorum holds everything
    assert lag[ensemble[0]] >= 100 and lag[ensemble[1]] == lag[ensemble[2]] == 0
    replicas.by_address(ensemble[1]).pause()  # two silent: one ack is not a quorum
    blocked = log.append(b"needs-two")
    time.sleep(1.0)
    assert not blocked.done()
    replicas.by_address(ensemble[1]).resume()
    assert blocked.result(30) == LogAddress(201)
    stopped[0].resume()
    deadline = time.monotonic() + 30
    while log.replica_lag()[ensemble[0]] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.replica_lag() == {address: 0 for address in ensemble}  # it caught up once it answered again
    log.close()
    got = read_back(replicas)
    assert [p for _, p in got] == [f"a{i}".encode() for i in range(100)] + [
        f"b{i}".encode() for i in range(100)] + [b"needs-two"]


@pytest.mark.parametrize("replicas", [4], indirect=True)
@pytest.mark.parametrize("tiering", [False, True], ids=["no-truncation", "truncating"])
def test_sigkill_of_a_replica_under_load_loses_nothing_and_replaces_it(replicas: Replicas, tiering: bool) -> None:
    log = replicas.opened(request_timeout=2.0)
    acked: dict[int, bytes] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def writer(worker: int) -> None:
        index = 0
        while not stop.is_set():
            batch: list[tuple[bytes, Future[LogAddress]]] = []
            for _ in range(8):
                payload = payload_for(worker, index)
                batch.append((payload, log.append(payload)))
                index += 1
            for payload, future in batch:
                try:
                    address = future.result(60)
                except BaseException as exc:  # noqa: BLE001 - the test counts every failure
                    errors.append(exc)
                    return
                with lock:
                    acked[address.sequence] = payload

    def truncator() -> None:
        # Tiering goes on meanwhile: truncation races the replacement and the re-replication.
        while not stop.wait(0.2):
            with lock:
                done = sorted(acked)
            contiguous = next((i for i, s in enumerate(done, start=1) if s != i), len(done) + 1) - 1
            if contiguous > 1000:
                log.truncate(LogAddress(contiguous - 1000))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    if tiering:
        threads.append(threading.Thread(target=truncator))
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) > 2000)
    ensemble = log.record.fragments[-1].ensemble
    victim_address = ensemble[0]
    (spare,) = (a for a in replicas.addresses if a not in ensemble)
    replicas.by_address(victim_address).kill()
    count_at_kill = len(acked)
    # Appends go on while the dead replica is detected and replaced, and after.
    wait_until(lambda: log.replacements >= 1 and len(acked) > count_at_kill + 3000
               and (log.record.truncated > 0 or not tiering))
    stop.set()
    for t in threads:
        t.join(60)
    assert errors == []
    # The failed replica leaves every fragment: the open one at once, closed ones once re-replicated.
    wait_until(lambda: all(victim_address not in f.ensemble for f in log.record.fragments))
    record = log.record
    assert all(spare in f.ensemble for f in record.fragments)
    # The spare really holds the closed fragment it was swapped into (copied from the survivors).
    # (Truncation may have dropped the closed fragment altogether: then there is nothing to hold.)
    assert len(record.fragments) == 2 or tiering
    start, closed_end = record.truncated + 1, record.fragment_end(0, 0) if len(record.fragments) == 2 else 0
    rpc = ReplicaRpc()
    try:
        held: list[int] = []
        while start + len(held) <= closed_end:
            reply = rpc.call_one(spare, {"op": "read", "log": "log", "from": start + len(held), "to": closed_end,
                                         "max_bytes": 1 << 22}, [], 30)
            assert reply is not None and reply[0]["entries"], reply
            held += [s for s, e, _ in reply[0]["entries"] if e == record.fragments[0].epoch]
        assert held == list(range(start, closed_end + 1))
    finally:
        rpc.close()
    log.close()
    truncated = record.truncated
    assert (truncated > 0) == tiering
    got = dict(read_back(replicas))
    assert all(got.get(sequence) == payload for sequence, payload in acked.items() if sequence > truncated)
    assert sorted(got) == list(range(truncated + 1, truncated + len(got) + 1))


def test_a_fenced_owner_cannot_append_and_its_entry_is_never_read(replicas: Replicas) -> None:
    old = replicas.opened()
    assert old.append(b"before").result(30) == LogAddress(1)
    new = replicas.opened()
    assert [e.payload for e in new.read_all()] == [b"before"]
    late = old.append(b"zombie")
    with pytest.raises(DataLogWriterFencedError):
        late.result(30)
    with pytest.raises(DataLogWriterFencedError):
        old.append(b"again").result(30)
    assert new.append(b"after").result(30) == LogAddress(2)
    new.close()
    old.close()
    assert read_back(replicas) == [(1, b"before"), (2, b"after")]


def _raw_append(address: str, sequence: int, epoch: int, first: int, payload: bytes) -> None:
    """What a dying owner's last message does: one entry reaches one replica."""
    from crc32c import crc32c

    rpc = ReplicaRpc()
    try:
        reply = rpc.call_one(address, {"op": "append", "log": "log", "epoch": epoch, "entry_epoch": epoch,
                                       "first": first, "entries": [[sequence, crc32c(payload)]]}, [payload], 30)
        assert reply is not None and reply[0]["status"] == "ok", reply
    finally:
        rpc.close()


@pytest.mark.parametrize("replicas", [1], indirect=True)
def test_a_replica_answers_malformed_requests_with_bad_request_and_keeps_serving(replicas: Replicas) -> None:
    """Whatever a header holds, the replica answers ``bad_request`` (with the request's id when it has
    one) and goes on serving: no exception of its header codec reaches its loop."""
    (address,) = replicas.addresses
    socket = connect_dealer(zmq.Context.instance(), address)
    try:
        for header, expected_id in ((b"not json", None), (b"[1, 2]", None), (b"\xff\xfe{}", None),
                                    (b'{"op": "append", "id": 7}', 7),  # no log, no epoch
                                    (b'{"op": "compact", "id": 8, "log": "log"}', 8),  # no such op
                                    (b'{"op": "read", "id": 9, "log": "", "from": 1, "to": 2, "max_bytes": 9}', 9)):
            socket.send_multipart([header])
            assert socket.poll(30_000), f"no answer to {header!r}"
            answer = wire.decode_header(socket.recv_multipart()[0])
            assert (answer["status"], answer["id"]) == (wire.BAD_REQUEST, expected_id), (header, answer)
    finally:
        socket.close(0)
    _raw_append(address, 1, 1, 1, b"still serving")
    rpc = ReplicaRpc()
    try:
        reply = rpc.call_one(address, {"op": "read", "log": "log", "from": 1, "to": 1, "max_bytes": 1 << 20}, [], 30)
    finally:
        rpc.close()
    assert reply is not None and reply[0]["status"] == wire.OK and reply[1] == [b"still serving"], reply


def _owner_dies_with_a_tail_on_one_replica(replicas: Replicas) -> tuple[ReplicatedDurableDataLog, str]:
    owner = replicas.opened()
    for i in range(5):
        owner.append(f"acked{i}".encode()).result(30)
    fragment = owner.record.fragments[-1]
    holder = fragment.ensemble[0]
    # An append is acknowledged by an ack quorum: the third replica may still be receiving entry 5, and
    # entry 6 would then be a gap there. Wait until the holder has it.
    rpc = ReplicaRpc()
    try:
        def holds_entry_5() -> bool:
            reply = rpc.call_one(holder, {"op": "read", "log": "log", "from": 5, "to": 5, "max_bytes": 1 << 20},
                                 [], 30)
            return reply is not None and reply[0]["status"] == wire.OK and len(reply[1]) == 1

        wait_until(holds_entry_5)
    finally:
        rpc.close()
    _raw_append(holder, 6, owner.epoch, fragment.first, b"unacked")  # the owner dies here, never closes
    return owner, holder


def test_recovery_drops_a_tail_the_fenced_quorum_lacks_and_never_shows_it_later(replicas: Replicas) -> None:
    owner, holder = _owner_dies_with_a_tail_on_one_replica(replicas)
    replicas.by_address(holder).kill()
    recovered = replicas.opened()
    seen = [e.payload for e in recovered.read_all()]
    assert seen == [f"acked{i}".encode() for i in range(5)]
    assert recovered.append(b"new6").result(30) == LogAddress(6)
    recovered.close()
    replicas.by_address(holder).start()  # comes back still holding the dropped entry
    again = read_back(replicas)
    assert again == [(i + 1, f"acked{i}".encode()) for i in range(5)] + [(6, b"new6")]
    del owner


def test_recovery_keeps_a_tail_it_finds_and_replicates_it_to_a_quorum(replicas: Replicas) -> None:
    owner, holder = _owner_dies_with_a_tail_on_one_replica(replicas)
    recovered = replicas.opened()
    seen = [e.payload for e in recovered.read_all()]
    assert seen == [f"acked{i}".encode() for i in range(5)] + [b"unacked"]
    recovered.close()
    replicas.by_address(holder).kill()  # the only original holder: the copy made at recovery must serve
    assert [p for _, p in read_back(replicas)] == seen
    del owner


def test_truncation_deletes_entries_on_the_replicas(replicas: Replicas) -> None:
    log = replicas.opened()
    futures = [log.append(f"t{i}".encode()) for i in range(100)]
    log.truncate(futures[49].result(30))
    assert log.record.truncated == 50
    rpc = ReplicaRpc()
    try:
        def low_entries(address: str) -> list[int]:
            reply = rpc.call_one(address, {"op": "read", "log": "log", "from": 1, "to": 100, "max_bytes": 1 << 20},
                                 [], 30)
            assert reply is not None
            return [s for s, _, _ in reply[0]["entries"] if s <= 50]

        wait_until(lambda: all(low_entries(a) == [] for a in replicas.addresses))
    finally:
        rpc.close()
    log.close()
    got = read_back(replicas)
    assert got[0] == (51, b"t50") and len(got) == 50


def test_reads_skip_a_replica_whose_copy_fails_its_crc(replicas: Replicas) -> None:
    log = replicas.opened()
    payload = b"precious-" * 100
    log.append(payload).result(30)
    log.close()
    victim = replicas.logds[0]
    journal = sorted(Path(victim.data_dir).glob("*.journal"))
    for path in journal:
        data = path.read_bytes()
        at = data.find(payload)
        if at >= 0:
            with open(path, "r+b") as f:  # bit rot under a running replica
                f.seek(at + 10)
                f.write(b"X")
                f.flush()
                os.fsync(f.fileno())
            break
    else:
        raise AssertionError("payload not in the journal")
    rpc = ReplicaRpc()
    try:
        reply = rpc.call_one(victim.address, {"op": "read", "log": "log", "from": 1, "to": 1, "max_bytes": 1 << 20},
                             [], 30)
        # The replica checks the CRC as it reads and answers the damaged copy as corrupt, unsent.
        assert reply is not None and reply[0]["corrupt"] == [1, 1] and reply[1] == []
    finally:
        rpc.close()
    # Every replica is asked first in turn by some read; the damaged copy is never returned.
    for _ in range(3):
        assert read_back(replicas) == [(1, payload)]


OWNER = """
import os, sys, threading
from millrace.store.durablelog.metadata import FileLogMetadataStore
from millrace.store.durablelog.replicated import ReplicatedDurableDataLog
from millrace.store.durablelog.replication_config import ReplicationConfig
from tests.durablelog.helpers import payload_for
log = ReplicatedDurableDataLog("log", FileLogMetadataStore(sys.argv[1]),
                               ReplicationConfig(tuple(sys.argv[2].split(",")), 3, 2))
log.open()
def ack(worker, index):
    def done(future):
        os.write(1, f"{future.result().sequence} {worker} {index}\\n".encode())
    return done
def run(worker):
    index = 0
    while True:
        futures = []
        for _ in range(16):
            f = log.append(payload_for(worker, index))
            f.add_done_callback(ack(worker, index))
            futures.append(f)
            index += 1
        for f in futures:
            f.result()
os.write(1, b"ready\\n")
for w in range(3):
    threading.Thread(target=run, args=(w,), daemon=True).start()
threading.Event().wait()
"""


def test_an_owner_process_killed_mid_append_loses_no_ack_and_recoveries_agree(replicas: Replicas) -> None:
    child = subprocess.Popen([sys.executable, "-c", OWNER, replicas.metadata.directory, ",".join(replicas.addresses)],
                             cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT), stdout=subprocess.PIPE)
    assert child.stdout is not None
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(child.stdout.readline, b"")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    wait_until(lambda: len(lines) > 3000)
    child.send_signal(signal.SIGKILL)  # mid-append: the last entries reached some replicas, not others
    child.wait(30)
    reader.join(30)
    acked = {}
    for line in lines[1:]:
        if line.endswith(b"\n"):
            sequence, worker, index = map(int, line.split())
            acked[sequence] = payload_for(worker, index)
    first = read_back(replicas)
    assert all(dict(first).get(s) == p for s, p in acked.items())
    assert [s for s, _ in first] == list(range(1, len(first) + 1))
    assert read_back(replicas) == first  # a second recovery finds exactly what the first one did
