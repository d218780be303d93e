"""The replicated durable log: a DurableDataLog kept on an ensemble of ``millrace logd`` replicas.

This module is the owner's handle on the log (BookKeeper's LedgerHandle): the write path and the
ensemble changes. Opening's fencing and recovery are ``replicated_recovery``, the background repair
(re-replication, grow-back copies, bad-copy rewrites, truncation sends) is ``replicated_repair``,
reading and copying a fragment's entries between replicas is ``fragment_copy``, and the metadata
record all of them change is the ``OwnedRecord`` (``metadata``).

**Quorums.** Each entry goes to every replica of the current ensemble (write quorum W, the ensemble
size) and is acknowledged once an ack quorum AQ of them has fsync'd it; futures complete in sequence
order, so "last confirmed" (LAC) is the highest sequence whose every predecessor is acknowledged. A
replica that answers with an error, does not answer within ``request_timeout`` or falls further than
``max_retained_bytes`` behind is *replaced*: a new fragment starting at LAC + 1 is recorded in the
metadata with a spare in its place, unconfirmed entries are resent to the spare, and the maintenance
thread copies the closed fragments the failed replica was in onto a spare, then records the swap.
With no spare the ensemble shrinks; every ``probe_interval`` the maintenance thread then asks the
replicas outside it, and the first that answers (a failed one only after a hold-off that doubles
with each failure) joins through the same ensemble change: a new fragment at LAC + 1 and the
unconfirmed entries resent. Then the closed fragments that list it are topped up on it (it may lack
their tail) and each closed fragment written while the ensemble was short is copied onto it and the
addition recorded. While AQ replicas of the ensemble remain, no append waits for any of this.

**Opening** (a new owner) takes the next epoch and runs ``replicated_recovery.recover``: fence,
recover the old owner's tail, record the new fragment; the writer starts right after the recovered
end. **Reading** (``read_all``) reads each fragment with ``fragment_copy.read_range``, asking first
the replicas that answered the open; bad copies it meets go to the maintenance thread for rewriting.

Threads: ``append`` from any thread (a deque and a wake-up pipe); one I/O thread owns the sockets
of the current ensemble and the write-path state (sequences, acks, retained entries, the ensemble,
replica failures and hold-offs), sends batches, counts acks, makes every ensemble change and
completes futures (callbacks run there and must be quick); other threads hand it work only through
the append queue and the ``_control`` deque. One maintenance thread (``replicated_repair``)
re-replicates and sends truncations; it sees the writer only through ``RepairHost``: atomic reads
(an attribute, a dict or set lookup) of state the I/O thread writes, and requests the I/O thread
carries out. The metadata record is changed through the ``OwnedRecord`` by whichever thread needs
to (its lock orders the compare-and-sets). ``open``, ``read_all``, ``truncate`` and ``close`` block
and belong off the reactor; ``open`` (recovery included) runs before either thread starts, and
``read_all`` only before the first append.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import zmq
from crc32c import crc32c

from millrace.store.durablelog.fragment_copy import read_range
from millrace.store.durablelog.interface import DurableDataLog, LogAddress, LogEntry, admit_append
from millrace.store.durablelog.metadata import Fragment, LogMetadataStore, LogRecord, OwnedRecord
from millrace.store.durablelog.replica_rpc import ReplicaRpc, connect_dealer
from millrace.store.durablelog.replicated_recovery import recover
from millrace.store.durablelog.replicated_repair import ReplicaRepair
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.durablelog.zmq_frames import readable, recv_frames, send_frames
from millrace.store.errors import ContainerOfflineError, DataLogWriterFencedError
from millrace.store.latency import LatencyHistogram
from millrace.store.logd import wire

log = logging.getLogger(__name__)


class _Pending:
    __slots__ = ("sequence", "payload", "crc", "future", "sent")

    def __init__(self, sequence: int, payload: bytes, future: Future[LogAddress], sent: float) -> None:
        self.sequence = sequence
        self.payload = payload
        self.crc = crc32c(payload)
        self.future = future
        self.sent = sent  # monotonic time it was first sent: its acknowledgement's latency starts here


class ReplicatedDurableDataLog(DurableDataLog):
    """A log named ``log_name`` on the replicas of ``config``, described in ``metadata``."""

    def __init__(self, log_name: str, metadata: LogMetadataStore, config: ReplicationConfig,
                 context: zmq.Context[Any] | None = None) -> None:
        self.log_name = log_name
        self.config = config
        self._context = context or zmq.Context.instance()
        self._owned = OwnedRecord(log_name, metadata)
        self._repair = ReplicaRepair(self._owned, config, self._context, host=self)
        self._queue: collections.deque[tuple[bytes, Future[LogAddress]]] = collections.deque()
        self._control: collections.deque[Callable[[], None]] = collections.deque()
        self._accepting = False
        self._appended = False
        self._failure: BaseException | None = None
        self._sleeping = False
        self._wake_r = self._wake_w = -1
        self._io: threading.Thread | None = None
        # I/O-thread state
        self._next_sequence = 1
        self._confirmed = 0
        self._ensemble: list[str] = []
        self._start: dict[str, int] = {}  # first sequence each member is sent by this owner
        self._acked: dict[str, int] = {}
        self._sockets: dict[str, zmq.Socket[Any]] = {}
        self._outstanding: dict[str, collections.deque[tuple[int, float]]] = {}
        self._awaiting: collections.deque[_Pending] = collections.deque()
        self._retained: collections.deque[_Pending] = collections.deque()
        self._retained_bytes = 0
        self._failed: set[str] = set()
        self._failures: dict[str, tuple[int, float]] = {}  # replica: (failures so far, when it may rejoin)
        self._reachable: set[str] = set()  # replicas that answered while opening: asked first by reads
        self._request_ids = 0
        self._sizes: collections.deque[tuple[int, int]] = collections.deque()
        self._size_total = 0
        self.replacements = 0
        self.growths = 0
        # From an entry's first send to its ack quorum (BookKeeper's add-entry latency), for /metrics:
        # written by the I/O thread only.
        self.ack_latency = LatencyHistogram()

    @property
    def record(self) -> LogRecord:
        return self._owned.record

    @property
    def epoch(self) -> int:
        return self._owned.epoch

    def under_replicated_fragments(self) -> int:
        """Fragments of the log's record kept on fewer replicas than the write quorum (an ensemble that
        shrank with no spare, not yet grown back): what re-replication has still to mend."""
        quorum = self.config.write_quorum
        return sum(1 for fragment in self._owned.record.fragments if len(fragment.ensemble) < quorum)

    def replica_lag(self) -> dict[str, int]:
        """Per member of the current ensemble: entries sent to it that it has not acknowledged yet (any
        thread: copies of the I/O thread's state, each taken whole under the GIL)."""
        sent = self._next_sequence - 1
        acked = dict(self._acked)
        return {address: max(0, sent - acked.get(address, sent)) for address in list(self._ensemble)}

    @property
    def repairs(self) -> int:
        """Bad copies of entries rewritten from a good one."""
        return self._repair.repairs

    # -- open ----------------------------------------------------------------------------------------------
    def open(self) -> None:
        if self._accepting or self._io is not None:
            raise RuntimeError("durable log is already open")
        self._owned.take_epoch()
        rpc = ReplicaRpc(self._context, self.config.curve)
        try:
            recovered = recover(rpc, self._owned, self.config, self._repair.copier)
        finally:
            rpc.close()
        next_sequence = recovered.next_sequence
        self._reachable = recovered.reachable
        self._confirmed = next_sequence - 1
        self._next_sequence = next_sequence
        self._ensemble = recovered.ensemble
        self._failure = None
        self._appended = False
        self._queue.clear()
        self._awaiting.clear()
        self._retained.clear()
        self._retained_bytes = 0
        self._failed = set()
        self._failures = {}
        self._sizes.clear()
        self._size_total = 0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        for address in recovered.ensemble:
            self._connect(address, next_sequence)
        self._accepting = True
        self._io = threading.Thread(target=self._run_io, name=f"replicated-log:{self.log_name}", daemon=True)
        self._io.start()
        self._repair.start()
        for address in recovered.lagging:
            self._repair.repair(address)
        log.info("log %s: opened at epoch %d, next sequence %d, ensemble %s", self.log_name, self.epoch,
                 next_sequence, ",".join(recovered.ensemble))

    # -- RepairHost: what the maintenance thread may ask of the writer ------------------------------------
    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def broken(self) -> bool:
        return self._failure is not None

    def current_ensemble(self) -> Sequence[str]:
        return self._ensemble  # replaced whole by the I/O thread, never changed in place

    def has_failed(self, address: str) -> bool:
        return address in self._failed

    def may_rejoin(self, address: str, now: float) -> bool:
        return self._failures.get(address, (0, 0.0))[1] <= now

    def request_grow(self, address: str) -> None:
        self._control.append(lambda: self._grow(address))
        self._wake()

    def request_failure(self, address: str, why: str) -> None:
        self._control.append(lambda: self._fail_replica(address, why))
        self._wake()

    # -- reading -------------------------------------------------------------------------------------------
    def read_all(self) -> Iterator[LogEntry]:
        if not self._accepting:
            raise ContainerOfflineError(f"durable log {self.log_name} is not open")
        if self._appended:
            raise RuntimeError("read_all() is only valid before the first append")
        record = self.record
        end = self._next_sequence - 1
        return self._read_record(record, end)

    def _read_record(self, record: LogRecord, end: int) -> Iterator[LogEntry]:
        rpc = ReplicaRpc(self._context, self.config.curve)
        try:
            for index, fragment in enumerate(record.fragments):
                start = max(fragment.first, record.truncated + 1)
                stop = record.fragment_end(index, end)
                members = sorted(fragment.ensemble, key=lambda a: a not in self._reachable)
                for sequence, payload, _ in read_range(rpc, self.log_name, fragment, members, start,
                                                       stop, self.config.request_timeout, self._repair.bad_copy):
                    self._note_size(sequence, len(payload))
                    yield LogEntry(LogAddress(sequence), payload)
        finally:
            rpc.close()

    def _note_size(self, sequence: int, size: int) -> None:
        self._sizes.append((sequence, size))
        self._size_total += size

    @property
    def size_bytes(self) -> int:
        return self._size_total

    # -- appending -----------------------------------------------------------------------------------------
    def append(self, payload: bytes) -> Future[LogAddress]:
        refused = self._refusal() if not self._accepting or self._failure is not None else None
        payload, future = admit_append(payload, refused)
        if future.done():
            return future
        self._queue.append((payload, future))
        self._appended = True
        self._wake()
        return future

    def _wake(self) -> None:
        if self._sleeping:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"x")

    def _refusal(self) -> BaseException:
        if isinstance(self._failure, DataLogWriterFencedError):
            return DataLogWriterFencedError(str(self._failure))
        if self._failure is not None:
            error = ContainerOfflineError(f"durable log {self.log_name} failed")
            error.__cause__ = self._failure
            return error
        return ContainerOfflineError(f"durable log {self.log_name} is not open")

    def truncate(self, upto: LogAddress) -> None:
        if not self._accepting:
            raise ContainerOfflineError(f"durable log {self.log_name} is not open")
        if upto.sequence >= self._next_sequence:
            raise ValueError(f"cannot truncate to {upto.sequence}: nothing was written there")
        if upto.sequence <= self.record.truncated:
            return
        self._owned.change(lambda r: r.truncated_to(upto.sequence))
        self._control.append(lambda: self._forget_sizes(upto.sequence))
        self._wake()
        self._repair.truncate(upto.sequence)

    def _forget_sizes(self, upto: int) -> None:
        while self._sizes and self._sizes[0][0] <= upto:
            self._size_total -= self._sizes.popleft()[1]

    def close(self) -> None:
        self._accepting = False
        io = self._io
        if io is not None:
            self._sleeping = True
            self._wake()
            io.join()
            self._io = None
        self._repair.stop()
        self._fail_queued(self._refusal())
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- the I/O thread ------------------------------------------------------------------------------------
    def _connect(self, address: str, start: int) -> None:
        self._sockets[address] = connect_dealer(self._context, address, self.config.curve)
        self._start[address] = start
        self._acked[address] = start - 1
        self._outstanding[address] = collections.deque()

    def _disconnect(self, address: str) -> None:
        socket = self._sockets.pop(address, None)
        if socket is not None:
            socket.close(0)
        self._start.pop(address, None)
        self._acked.pop(address, None)
        self._outstanding.pop(address, None)

    def _run_io(self) -> None:
        poller = zmq.Poller()
        poller.register(self._wake_r, zmq.POLLIN)
        registered: set[zmq.Socket[Any]] = set()
        close_deadline: float | None = None
        try:
            while True:
                for socket in set(self._sockets.values()) - registered:
                    poller.register(socket, zmq.POLLIN)
                    registered.add(socket)
                for socket in registered - set(self._sockets.values()):
                    poller.unregister(socket)
                    registered.discard(socket)
                self._sleeping = True
                busy = bool(self._queue or self._control)
                events = dict(poller.poll(0 if busy else 50))
                self._sleeping = False
                if self._wake_r in events:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                for address, socket in list(self._sockets.items()):
                    if socket in events:
                        self._receive(address, socket)
                while self._control:
                    self._control.popleft()()
                if self._failure is not None:
                    self._fail_queued(self._refusal())
                else:
                    self._send_queued()
                    self._check_replicas()
                if not self._accepting and not self._queue and not self._awaiting:
                    return
                if not self._accepting:
                    close_deadline = close_deadline or time.monotonic() + self.config.open_timeout
                    if time.monotonic() > close_deadline:
                        self._break(ContainerOfflineError(f"log {self.log_name}: closed with entries unacknowledged"))
                        return
        except BaseException as exc:  # the I/O thread must never strand a future
            log.exception("log %s: I/O thread failed", self.log_name)
            self._break(exc)
        finally:
            for address in list(self._sockets):
                self._disconnect(address)

    def _send_queued(self) -> None:
        queue_ = self._queue
        while queue_:
            batch: list[_Pending] = []
            size = 0
            now = time.monotonic()
            while queue_ and size < self.config.max_batch_bytes:
                payload, future = queue_.popleft()
                pending = _Pending(self._next_sequence, payload, future, now)
                self._next_sequence += 1
                batch.append(pending)
                size += len(payload)
                self._note_size(pending.sequence, len(payload))
            self._awaiting.extend(batch)
            self._retained.extend(batch)
            self._retained_bytes += size
            for address in self._ensemble:
                self._send(address, batch)

    def _send(self, address: str, batch: list[_Pending]) -> None:
        self._request_ids += 1
        epoch = self._owned.epoch
        header = {"op": "append", "id": self._request_ids, "log": self.log_name, "epoch": epoch,
                  "entry_epoch": epoch, "first": self._start[address], "lac": self._confirmed,
                  "truncated": self._owned.peek().truncated, "entries": [[p.sequence, p.crc] for p in batch]}
        # Outstanding even when the socket had no connection to take it: unanswered, the replica is then
        # replaced after ``request_timeout`` like one that stopped answering.
        send_frames(self._sockets[address], [wire.encode_header(header), *(p.payload for p in batch)])
        self._outstanding[address].append((self._request_ids, time.monotonic()))

    def _receive(self, address: str, socket: zmq.Socket[Any]) -> None:
        while address in self._sockets and readable(socket):
            frames = recv_frames(socket)
            header = wire.decode_header(frames[0])
            outstanding = self._outstanding[address]
            while outstanding and outstanding[0][0] <= header.get("id", 0):
                outstanding.popleft()
            status = header.get("status")
            if status == wire.OK:
                self._acked[address] = max(self._acked[address], int(header.get("last", 0)))
            elif status == wire.FENCED:
                self._break(DataLogWriterFencedError(
                    f"log {self.log_name}: replica {address} was fenced at epoch {header.get('fenced')}"))
                return
            else:
                self._replace(address, f"answered {header}")
                return
        self._advance()

    def _advance(self) -> None:
        """Complete the futures an ack quorum now holds, in order; forget what every member holds."""
        acked = sorted((self._acked[a] for a in self._ensemble), reverse=True)
        quorum = min(acked[self.config.ack_quorum - 1], self._next_sequence - 1)
        awaiting = self._awaiting
        if quorum > self._confirmed:
            self._confirmed = quorum
            now, latency = time.monotonic(), self.ack_latency
            while awaiting and awaiting[0].sequence <= quorum:
                pending = awaiting.popleft()
                latency.observe(now - pending.sent)
                with contextlib.suppress(InvalidStateError):
                    pending.future.set_result(LogAddress(pending.sequence))
        # An entry is kept for resending until every member that is sent it (from its start) holds it.
        retained = self._retained
        start, acked_by = self._start, self._acked
        while retained:
            sequence = retained[0].sequence
            if any(sequence >= start[a] and acked_by[a] < sequence for a in self._ensemble):
                break
            self._retained_bytes -= len(retained.popleft().payload)

    def _check_replicas(self) -> None:
        now = time.monotonic()
        for address in list(self._ensemble):
            outstanding = self._outstanding.get(address)
            if outstanding and now - outstanding[0][1] > self.config.request_timeout:
                self._replace(address, f"no answer for {now - outstanding[0][1]:.1f} s")
                return
        if self._retained_bytes > self.config.max_retained_bytes and self._ensemble:
            slowest = min(self._ensemble, key=lambda a: self._acked[a])
            self._replace(slowest, f"{self._retained_bytes} bytes behind")

    def _replace(self, failed: str, why: str) -> None:
        """Start a new fragment at LAC + 1 without ``failed`` (a spare in its place when there is one)."""
        log.warning("log %s: replacing replica %s (%s)", self.log_name, failed, why)
        self._note_failure(failed)
        survivors = [a for a in self._ensemble if a != failed]
        spare = self._spare()
        ensemble = survivors + ([spare] if spare else [])
        if len(ensemble) < self.config.ack_quorum:
            self._break(ContainerOfflineError(f"log {self.log_name}: fewer than {self.config.ack_quorum} replicas left"))
            return
        if self._change_ensemble(ensemble, joining=spare, leaving=failed):
            self.replacements += 1
            self._repair.repair(failed)

    def _note_failure(self, failed: str) -> None:
        self._failed.add(failed)
        count = self._failures.get(failed, (0, 0.0))[0] + 1
        # A replica that keeps failing is taken back ever more slowly, so a flapping one cannot make
        # the log record two ensemble changes every probe.
        hold_off = min(60.0, max(self.config.probe_interval, self.config.request_timeout) * 2 ** (count - 1))
        self._failures[failed] = (count, time.monotonic() + hold_off)

    def _spare(self) -> str | None:
        return next((a for a in self.config.replicas if a not in self._ensemble and a not in self._failed), None)

    def _fail_replica(self, address: str, why: str) -> None:
        """A replica that keeps answering bad copies is failing, like one that answers errors (as a
        BookKeeper client quarantines a bookie that keeps failing): replaced in the current ensemble,
        swapped out of the closed fragments that list it where a spare exists, and taken back only
        after the hold-off. Never at the price of the log: an ensemble at the ack quorum with no spare
        keeps it (its bad copies are still rewritten)."""
        if self._failure is not None or not self._accepting:
            return
        if address in self._ensemble:
            if len(self._ensemble) <= self.config.ack_quorum and self._spare() is None:
                log.warning("log %s: replica %s %s, but the ensemble cannot lose it", self.log_name, address, why)
                return
            self._replace(address, why)
            return
        log.warning("log %s: replica %s %s: moving it out of the closed fragments that list it", self.log_name,
                    address, why)
        self._note_failure(address)
        self._repair.repair(address)

    def _grow(self, joining: str) -> None:
        """Add ``joining`` (it just answered the maintenance thread) to an ensemble that shrank."""
        if (self._failure is not None or not self._accepting or joining in self._ensemble
                or len(self._ensemble) >= self.config.write_quorum):
            return
        if self._change_ensemble([*self._ensemble, joining], joining=joining):
            log.info("log %s: ensemble grew back to %s", self.log_name, ",".join(self._ensemble))
            self._failed.discard(joining)
            self.growths += 1
            # What it missed while away: the fragments that list it (it may lack their tail) and those
            # written while the ensemble was short; then the periodic check keeps the rest in line.
            self._repair.rejoin(joining)

    def _change_ensemble(self, ensemble: list[str], joining: str | None, leaving: str | None = None) -> bool:
        """The one ensemble change: record a fragment at LAC + 1 with ``ensemble`` (compare-and-set),
        then send ``joining`` the unconfirmed entries. False if the log failed instead."""
        first = self._confirmed + 1
        try:
            self._owned.change(lambda r: r.with_fragment(Fragment(self._owned.epoch, first, tuple(ensemble))))
        except BaseException as exc:  # noqa: BLE001 - fenced, or the metadata store is unreachable
            self._break(exc)
            return False
        if leaving is not None:
            self._disconnect(leaving)
        self._ensemble = ensemble
        if joining is not None:
            self._connect(joining, first)
            # Every entry past LAC is still retained: some member has not acknowledged it.
            resend = [p for p in self._retained if p.sequence >= first]
            for index in range(0, len(resend), 256):
                self._send(joining, resend[index : index + 256])
        self._advance()
        return True

    def _break(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        awaiting, self._awaiting = list(self._awaiting), collections.deque()
        self._retained.clear()
        self._retained_bytes = 0
        refusal = self._refusal()
        for pending in awaiting:
            with contextlib.suppress(InvalidStateError):
                pending.future.set_exception(refusal)
        self._fail_queued(refusal)

    def _fail_queued(self, error: BaseException) -> None:
        while True:
            try:
                _, future = self._queue.popleft()
            except IndexError:
                return
            with contextlib.suppress(InvalidStateError):
                future.set_exception(error)
