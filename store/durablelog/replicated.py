"""The replicated durable log: a DurableDataLog kept on an ensemble of ``millrace logd`` replicas.

**Quorums.** Each entry goes to every replica of the current ensemble (write quorum W, the ensemble
size) and is acknowledged once an ack quorum AQ of them has fsync'd it; futures complete in sequence
order, so "last confirmed" (LAC) is the highest sequence whose every predecessor is acknowledged. A
replica that answers with an error, does not answer within ``request_timeout`` or falls further than
``max_retained_bytes`` behind is *replaced*: a new fragment starting at LAC + 1 is recorded in the
metadata with a spare in its place, unconfirmed entries are resent to the spare, and a maintenance
thread copies the closed fragments the failed replica was in onto a spare, then records the swap.
With no spare the ensemble shrinks; every ``probe_interval`` the maintenance thread then asks the
replicas outside it, and the first that answers (a failed one only after a hold-off that doubles
with each failure) joins through the same ensemble change: a new fragment at LAC + 1 and the
unconfirmed entries resent. Then the closed fragments that list it are topped up on it (it may lack
their tail) and each closed fragment written while the ensemble was short is copied onto it and the
addition recorded. While AQ replicas of the ensemble remain, no append waits for any of this.

**Opening** (a new owner): bump the epoch in the metadata (compare-and-set), fence the last
fragment's ensemble with it, and wait for at least ``max(E - AQ + 1, min(AQ, E))`` of them: then at
most AQ - 1 unfenced replicas remain, so an older owner can never again gather an ack quorum, and
every entry the old owner had acknowledged (on AQ replicas) is held by at least one responder. The
recovered end is the highest sequence any responder holds in the old fragment's epoch (each holds a
prefix; see ``recovery_end``); the tail is copied onto every responder that lacks part of it, and
only then is the new owner's fragment (starting right after the recovered end) recorded. From that
moment an entry of the old epoch beyond the recovered end is outside every fragment of its epoch and
never read, whatever a replica still holds.

**Reading** asks a fragment's replicas in turn for ranges of entries, accepting an entry only with
the fragment's epoch and a matching CRC-32C; any replica holding it will do. A replica holding the
entry with that epoch but a bad payload (its logd answers ``corrupt``, or the CRC check here fails)
has the good copy rewritten onto it by the maintenance thread (counted in ``repairs``); one whose
rewritten copy reads bad again is treated as failing, like a replica that answers errors.

Threads: ``append`` from any thread (a deque and a wake-up pipe); one I/O thread owns the sockets
of the current ensemble, sends batches, counts acks and completes futures (callbacks run there and
must be quick); one maintenance thread re-replicates and sends truncations; ``open``, ``read_all``,
``truncate`` and ``close`` block and belong off the reactor.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, replace
from typing import Any

import zmq
from crc32c import crc32c

from millrace.store.durablelog.interface import DurableDataLog, LogAddress, LogEntry, admit_append
from millrace.store.durablelog.metadata import Fragment, LogMetadataStore, LogRecord, MetadataVersionError
from millrace.store.durablelog.replica_rpc import ReplicaRpc, connect_dealer
from millrace.store.errors import ContainerOfflineError, DataCorruptionError, DataLogWriterFencedError
from millrace.store.logd import wire

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ReplicationConfig:
    replicas: tuple[str, ...]  # the pool, "host:port"; those beyond the write quorum are spares
    write_quorum: int = 3
    ack_quorum: int = 2
    request_timeout: float = 5.0
    open_timeout: float = 30.0
    max_batch_bytes: int = 4 * 1024 * 1024
    max_retained_bytes: int = 64 * 1024 * 1024
    probe_interval: float = 1.0  # how often a shrunk log looks for a replica to grow back with

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= len(self.replicas):
            raise ValueError(f"need 1 <= ack quorum ({self.ack_quorum}) <= write quorum ({self.write_quorum}) "
                             f"<= replicas ({len(self.replicas)})")


def fence_quorum(ensemble_size: int, ack_quorum: int) -> int:
    """Fenced responders a new owner needs: enough that fewer than AQ replicas stay unfenced, and at
    least AQ (when the ensemble has them) so the recovered tail lands on an ack quorum."""
    return max(ensemble_size - ack_quorum + 1, min(ack_quorum, ensemble_size))


def recovery_end(first: int, truncated: int, held: Iterable[int]) -> int:
    """The recovery rule: the last sequence of a fragment starting at ``first`` that could have been
    acknowledged is the highest prefix end any fenced responder reports (an acknowledged entry sits on
    AQ replicas, and a fence quorum meets every AQ-sized set)."""
    return max([first - 1, truncated, *held])


#: Told of a replica's bad copy once a good one was found: (fragment, replica, sequence, payload, crc).
BadCopyHandler = Callable[[Fragment, str, int, bytes, int], None]


def read_range(rpc: ReplicaRpc, log_name: str, fragment: Fragment, members: Iterable[str], start: int,
               end: int, timeout: float, on_bad_copy: BadCopyHandler | None = None) -> Iterator[tuple[int, bytes, int]]:
    """(sequence, payload, crc) for start..end of ``fragment`` from whichever of ``members`` holds
    each entry with the fragment's epoch and a valid CRC; DataCorruptionError if none does.

    A member holding an entry with the fragment's epoch but a payload that fails its CRC-32C (checked
    here, end to end, or by the logd itself, which answers ``corrupt``) holds a *bad copy*: the entry
    is taken from another member and ``on_bad_copy`` is given the good one to repair it with."""
    order = list(members)
    sequence = start
    bad: list[str] = []  # members that answered a bad copy of ``sequence``
    while sequence <= end:
        for address in list(order):
            if address in bad:
                continue
            got = corrupt = False
            reply = rpc.call_one(address, {"op": "read", "log": log_name, "from": sequence, "to": end,
                                           "max_bytes": READ_CHUNK_BYTES}, [], timeout)
            if reply is not None and reply[0].get("status") == wire.OK:
                for (seq, entry_epoch, crc), payload in zip(reply[0]["entries"], reply[1], strict=True):
                    if seq != sequence or entry_epoch != fragment.epoch:
                        break
                    if crc32c(payload) != crc:
                        corrupt = True
                        break
                    if bad and on_bad_copy is not None:
                        for holder in bad:
                            on_bad_copy(fragment, holder, seq, payload, crc)
                    bad = []
                    yield seq, payload, crc
                    sequence += 1
                    got = True
                else:
                    corrupt = reply[0].get("corrupt") == [sequence, fragment.epoch]
            if corrupt:
                bad.append(address)
            if got:
                break
            order.remove(address)  # it lacks this entry (or is down): ask it last next time
            order.append(address)
        else:
            damaged = f" (bad copies on {', '.join(bad)})" if bad else ""
            raise DataCorruptionError(f"log {log_name}: entry {sequence} (epoch {fragment.epoch}) is on none of "
                                      f"{', '.join(order)}{damaged}")


class _Pending:
    __slots__ = ("sequence", "payload", "crc", "future")

    def __init__(self, sequence: int, payload: bytes, future: Future[LogAddress]) -> None:
        self.sequence = sequence
        self.payload = payload
        self.crc = crc32c(payload)
        self.future = future


class ReplicatedDurableDataLog(DurableDataLog):
    """A log named ``log_name`` on the replicas of ``config``, described in ``metadata``."""

    def __init__(self, log_name: str, metadata: LogMetadataStore, config: ReplicationConfig,
                 context: zmq.Context[Any] | None = None) -> None:
        self.log_name = log_name
        self.config = config
        self._metadata = metadata
        self._context = context or zmq.Context.instance()
        self._meta_lock = threading.Lock()
        self._record = LogRecord()
        self._epoch = 0
        self._queue: collections.deque[tuple[bytes, Future[LogAddress]]] = collections.deque()
        self._control: collections.deque[Callable[[], None]] = collections.deque()
        self._accepting = False
        self._appended = False
        self._failure: BaseException | None = None
        self._sleeping = False
        self._wake_r = self._wake_w = -1
        self._io: threading.Thread | None = None
        self._maintenance: threading.Thread | None = None
        self._jobs: queue.Queue[Callable[[ReplicaRpc], None] | None] = queue.Queue()
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
        self.repairs = 0  # bad copies of entries rewritten from a good one
        self._bad_lock = threading.Lock()
        self._bad_pending: set[tuple[str, int]] = set()  # (replica, sequence) bad copies awaiting rewrite
        self._repaired: dict[str, set[int]] = {}  # replica: sequences rewritten on it by this owner

    # -- metadata ------------------------------------------------------------------------------------------
    @property
    def record(self) -> LogRecord:
        with self._meta_lock:
            return self._record

    def _change(self, change: Callable[[LogRecord], LogRecord]) -> LogRecord:
        """Apply ``change`` to the metadata with a compare-and-set; a foreign change means fenced."""
        with self._meta_lock:
            try:
                self._record = self._metadata.compare_and_set(self.log_name, change(self._record),
                                                              self._record.version)
            except MetadataVersionError as exc:
                raise DataLogWriterFencedError(f"log {self.log_name}: epoch {self._epoch} was superseded") from exc
            return self._record

    # -- open / recovery -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def open(self) -> None:
        if self._accepting or self._io is not None:
            raise RuntimeError("durable log is already open")
        for _ in range(10):
            current = self._metadata.read(self.log_name)
            try:
                record = self._metadata.compare_and_set(self.log_name, replace(current, epoch=current.epoch + 1),
                                                        current.version)
                break
            except MetadataVersionError:
                continue  # another opener raced us: take the epoch after theirs
        else:
            raise DataLogWriterFencedError(f"log {self.log_name}: could not take an epoch")
        self._epoch = record.epoch
        with self._meta_lock:
            self._record = record
        rpc = ReplicaRpc(self._context)
        try:
            next_sequence, ensemble, lagging = self._recover(rpc, record)
        finally:
            rpc.close()
        self._confirmed = next_sequence - 1
        self._next_sequence = next_sequence
        self._ensemble = ensemble
        self._failure = None
        self._appended = False
        self._queue.clear()
        self._awaiting.clear()
        self._retained.clear()
        self._retained_bytes = 0
        self._failed = set()
        self._failures = {}
        self._repaired = {}
        self._sizes.clear()
        self._size_total = 0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        for address in ensemble:
            self._connect(address, next_sequence)
        self._accepting = True
        self._io = threading.Thread(target=self._run_io, name=f"replicated-log:{self.log_name}", daemon=True)
        self._io.start()
        self._maintenance = threading.Thread(target=self._run_maintenance, name=f"log-repair:{self.log_name}",
                                             daemon=True)
        self._maintenance.start()
        for address in lagging:
            self._jobs.put(self._repair_job(address))
        log.info("log %s: opened at epoch %d, next sequence %d, ensemble %s", self.log_name, self._epoch,
                 next_sequence, ",".join(ensemble))

    def _recover(self, rpc: ReplicaRpc, record: LogRecord) -> tuple[int, list[str], list[str]]:
        """Fence, find the recovered end, copy the tail onto the responders, record the new fragment.
        Returns (next sequence, the new ensemble, replicas of closed fragments that did not answer)."""
        config = self.config
        deadline = time.monotonic() + config.open_timeout
        last = record.fragments[-1] if record.fragments else None
        members = list(last.ensemble) if last else []
        fenced: dict[str, int] = {}
        alive: set[str] = set()
        while True:
            requests: dict[str, tuple[dict[str, Any], list[bytes]]] = {}
            for address in dict.fromkeys([*members, *config.replicas]):
                if address in fenced or address in alive:
                    continue
                if address in members and last is not None:
                    requests[address] = ({"op": "fence", "log": self.log_name, "epoch": self._epoch,
                                          "first": last.first, "entry_epoch": last.epoch,
                                          "truncated": record.truncated}, [])
                else:
                    requests[address] = ({"op": "last_confirmed", "log": self.log_name}, [])
            # Once enough have answered, a replica that is down costs a short grace, not the timeout.
            enough = fence_quorum(len(members), config.ack_quorum) if members else config.ack_quorum
            replies = rpc.call(requests, config.request_timeout, enough=enough, grace=0.5)
            for address, (header, _) in replies.items():
                if header.get("status") == wire.FENCED:
                    raise DataLogWriterFencedError(f"log {self.log_name}: replica {address} is fenced at epoch "
                                                   f"{header.get('fenced')}, newer than {self._epoch}")
                if header.get("status") != wire.OK:
                    continue
                alive.add(address)
                if address in members:
                    fenced[address] = int(header["last"])
            quorum_fenced = len(fenced) >= fence_quorum(len(members), config.ack_quorum)
            if quorum_fenced and len(alive) >= config.ack_quorum:
                break
            if time.monotonic() >= deadline:
                raise ContainerOfflineError(
                    f"log {self.log_name}: {len(fenced)} of {len(members)} replicas answered the fence, "
                    f"{len(alive)} of {len(config.replicas)} are reachable")
        self._reachable = alive
        truncated = record.truncated
        if last is None:
            end = truncated
        else:
            end = recovery_end(last.first, truncated, fenced.values())
            self._copy_tail(rpc, last, fenced, end)
        ensemble = [a for a in members if a in fenced]
        ensemble += [a for a in config.replicas if a in alive and a not in ensemble]
        ensemble = ensemble[: config.write_quorum]
        if len(ensemble) < config.ack_quorum:
            raise ContainerOfflineError(f"log {self.log_name}: {len(ensemble)} replicas answered, the ack "
                                        f"quorum is {config.ack_quorum}")
        self._change(lambda r: r.with_fragment(Fragment(self._epoch, end + 1, tuple(ensemble))))
        lagging = [a for f in record.fragments for a in f.ensemble if a not in alive or (a in members and a not in fenced)]
        return end + 1, ensemble, list(dict.fromkeys(lagging))

    def _copy_tail(self, rpc: ReplicaRpc, last: Fragment, held: dict[str, int], end: int) -> None:
        """Bring every fenced responder up to ``end`` (the old epoch's entries, under our epoch)."""
        behind = {a: h for a, h in held.items() if h < end}
        if not behind:
            return
        start = max(min(behind.values()), self.record.truncated) + 1
        self._copy_range(rpc, last, sorted(held, key=lambda a: -held[a]), start, end, last, behind)

    def _copy_range(self, rpc: ReplicaRpc, fragment: Fragment, sources: list[str], start: int, end: int,
                    written_as: Fragment, targets: dict[str, int]) -> None:
        """Copy entries start..end of ``fragment`` from ``sources`` (CRC-checked, bad copies reported)
        onto ``targets`` (address -> the last entry it holds) as entries of ``written_as``, in batches of
        up to ``max_batch_bytes``."""
        batch: list[tuple[int, bytes, int]] = []
        size = 0  # of the batch's payloads (kept, not summed again per entry: batches hold thousands)
        for item in read_range(rpc, self.log_name, fragment, sources, start, end, self.config.request_timeout,
                               self._bad_copy):
            batch.append(item)
            size += len(item[1])
            if item[0] == end or size >= self.config.max_batch_bytes:
                self._write_copies(rpc, written_as, targets, batch)
                batch, size = [], 0

    def _write_copies(self, rpc: ReplicaRpc, fragment: Fragment, targets: dict[str, int],
                      batch: list[tuple[int, bytes, int]]) -> None:
        requests = {}
        truncated = self.record.truncated
        for address, holds in targets.items():
            wanted = [(s, p, c) for s, p, c in batch if s > holds]
            if wanted:
                requests[address] = ({"op": "append", "log": self.log_name, "epoch": self._epoch,
                                      "entry_epoch": fragment.epoch, "first": fragment.first, "lac": 0,
                                      "truncated": truncated, "entries": [[s, c] for s, _, c in wanted]},
                                     [p for _, p, _ in wanted])
        replies = rpc.call(requests, self.config.request_timeout)
        for address in requests:
            header = replies.get(address, ({"status": "timeout"}, []))[0]
            if header.get("status") == wire.FENCED:
                raise DataLogWriterFencedError(f"log {self.log_name}: fenced while copying to {address}")
            if header.get("status") != wire.OK:
                raise ContainerOfflineError(f"log {self.log_name}: copying entries to {address} failed: {header}")
            targets[address] = batch[-1][0]

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
        rpc = ReplicaRpc(self._context)
        try:
            for index, fragment in enumerate(record.fragments):
                start = max(fragment.first, record.truncated + 1)
                stop = record.fragment_end(index, end)
                members = sorted(fragment.ensemble, key=lambda a: a not in self._reachable)
                for sequence, payload, _ in read_range(rpc, self.log_name, fragment, members, start,
                                                       stop, self.config.request_timeout, self._bad_copy):
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
        self._change(lambda r: r.truncated_to(upto.sequence))
        self._control.append(lambda: self._forget_sizes(upto.sequence))
        self._wake()
        self._jobs.put(self._truncate_job(upto.sequence))

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
        if self._maintenance is not None:
            self._jobs.put(None)
            self._maintenance.join()
            self._maintenance = None
        self._fail_queued(self._refusal())
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- the I/O thread ------------------------------------------------------------------------------------
    def _connect(self, address: str, start: int) -> None:
        self._sockets[address] = connect_dealer(self._context, address)
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
            while queue_ and size < self.config.max_batch_bytes:
                payload, future = queue_.popleft()
                pending = _Pending(self._next_sequence, payload, future)
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
        header = {"op": "append", "id": self._request_ids, "log": self.log_name, "epoch": self._epoch,
                  "entry_epoch": self._epoch, "first": self._start[address], "lac": self._confirmed,
                  "truncated": self._record.truncated, "entries": [[p.sequence, p.crc] for p in batch]}
        self._sockets[address].send_multipart([wire.encode_header(header), *(p.payload for p in batch)],
                                              copy=False)
        self._outstanding[address].append((self._request_ids, time.monotonic()))

    def _receive(self, address: str, socket: zmq.Socket[Any]) -> None:
        while address in self._sockets:
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
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
            while awaiting and awaiting[0].sequence <= quorum:
                pending = awaiting.popleft()
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
            self._jobs.put(self._repair_job(failed))

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
        self._jobs.put(self._repair_job(address))

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
            self._jobs.put(self._rejoin_job(joining))

    def _change_ensemble(self, ensemble: list[str], joining: str | None, leaving: str | None = None) -> bool:
        """The one ensemble change: record a fragment at LAC + 1 with ``ensemble`` (compare-and-set),
        then send ``joining`` the unconfirmed entries. False if the log failed instead."""
        first = self._confirmed + 1
        try:
            self._change(lambda r: r.with_fragment(Fragment(self._epoch, first, tuple(ensemble))))
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

    # -- the maintenance thread ----------------------------------------------------------------------------
    def _run_maintenance(self) -> None:
        rpc = ReplicaRpc(self._context)
        next_check = time.monotonic() + self.config.probe_interval
        try:
            while True:
                job: Callable[[ReplicaRpc], None] | None
                try:
                    job = self._jobs.get(timeout=max(0.0, next_check - time.monotonic()))
                except queue.Empty:
                    job = self._check_ensembles
                if job is None:
                    return
                if time.monotonic() >= next_check:  # due even while truncations keep the queue busy
                    next_check = time.monotonic() + self.config.probe_interval
                    if job != self._check_ensembles:  # (a bound method is a new object each time)
                        self._jobs.put(self._check_ensembles)
                try:
                    job(rpc)
                except DataLogWriterFencedError as exc:
                    log.warning("log %s: maintenance stopped: %s", self.log_name, exc)
                    return
                except Exception:  # noqa: BLE001 - a failed repair is tried again by the next check or replacement
                    log.exception("log %s: maintenance job failed", self.log_name)
        finally:
            rpc.close()

    def _truncate_job(self, upto: int) -> Callable[[ReplicaRpc], None]:
        def run(rpc: ReplicaRpc) -> None:
            record = self.record
            members = {a for f in record.fragments for a in f.ensemble}
            rpc.call({a: ({"op": "truncate", "log": self.log_name, "epoch": self._epoch, "upto": upto}, [])
                      for a in members}, self.config.request_timeout)

        return run

    def _repair_job(self, failed: str) -> Callable[[ReplicaRpc], None]:
        """Copy every closed fragment ``failed`` belongs to onto a spare, then record the swap."""

        def run(rpc: ReplicaRpc) -> None:
            while self._accepting:
                record = self.record
                index = next((i for i, f in enumerate(record.fragments[:-1]) if failed in f.ensemble), None)
                if index is None:
                    return
                fragment = record.fragments[index]
                spare = self._find_spare(rpc, fragment.ensemble, self.config.request_timeout)
                if spare is None:
                    log.warning("log %s: no spare replica to take %s's place in fragment %d", self.log_name,
                                failed, fragment.first)
                    return
                if not self._copy_fragment(rpc, record, index, [a for a in fragment.ensemble if a != failed], spare):
                    continue

                def swap(r: LogRecord, first: int = fragment.first, spare: str = spare) -> LogRecord:
                    return r.with_changed(first, lambda g: replace(
                        g, ensemble=tuple(spare if a == failed else a for a in g.ensemble)))

                self._change(swap)
                log.info("log %s: fragment %d re-replicated from %s to %s", self.log_name, fragment.first,
                         failed, spare)

        return run

    @property
    def _probe_timeout(self) -> float:
        """How long the periodic check waits for a replica's answer (a dead one must not hold it long)."""
        return min(self.config.request_timeout, max(self.config.probe_interval, 0.5))

    def _check_ensembles(self, rpc: ReplicaRpc) -> None:
        """Every ``probe_interval``: grow a current ensemble that shrank back to the write quorum with a
        replica that answers, else bring closed fragments written while it was short up to it."""
        record = self.record
        if not self._accepting or self._failure is not None or not record.fragments:
            return
        current = record.fragments[-1].ensemble
        if len(current) < self.config.write_quorum:
            now = time.monotonic()
            # The replicas that never failed first; a failed one only once its hold-off has passed.
            candidates = sorted((a for a in self.config.replicas if a not in current
                                 and self._failures.get(a, (0, 0.0))[1] <= now), key=lambda a: a in self._failed)
            timeout = self._probe_timeout
            replies = rpc.call({a: ({"op": "last_confirmed", "log": self.log_name}, []) for a in candidates}, timeout)
            joining = next((a for a in candidates if replies.get(a, ({}, []))[0].get("status") == wire.OK), None)
            if joining is not None:
                self._control.append(lambda: self._grow(joining))
                self._wake()
            return
        self._fill_short(rpc, record)

    def _fill_short(self, rpc: ReplicaRpc, record: LogRecord) -> None:
        """Copy each closed fragment held by fewer than ``write_quorum`` replicas (written while the
        ensemble was short) onto one more replica, then record it in the fragment's ensemble."""
        timeout = self._probe_timeout
        while self._accepting:
            index = next((i for i, f in enumerate(record.fragments[:-1])
                          if len(f.ensemble) < self.config.write_quorum), None)
            if index is None:
                return
            fragment = record.fragments[index]
            target = self._find_spare(rpc, fragment.ensemble, timeout)
            if target is None:
                return  # nothing to add: the next check tries again
            if self._copy_fragment(rpc, record, index, list(fragment.ensemble), target):
                def add(r: LogRecord, first: int = fragment.first, target: str = target) -> LogRecord:
                    return r.with_changed(first, lambda g: g if target in g.ensemble
                                          else replace(g, ensemble=(*g.ensemble, target)))

                self._change(add)
                log.info("log %s: fragment %d copied to %s (it was held by %d replicas)", self.log_name,
                         fragment.first, target, len(fragment.ensemble))
            record = self.record

    def _rejoin_job(self, joined: str) -> Callable[[ReplicaRpc], None]:
        """Top up a replica that came back on the closed fragments that still list it (it may lack what
        they got after it stopped answering), then fill the fragments written while it was away."""

        def run(rpc: ReplicaRpc) -> None:
            firsts = [f.first for f in self.record.fragments[:-1] if joined in f.ensemble]
            for first in firsts:
                while self._accepting:
                    record = self.record
                    index = next((i for i, f in enumerate(record.fragments[:-1]) if f.first == first), None)
                    if index is None or joined not in record.fragments[index].ensemble:
                        break  # truncated away, or swapped for a spare meanwhile
                    sources = [a for a in record.fragments[index].ensemble if a != joined]
                    if self._copy_fragment(rpc, record, index, sources, joined):
                        break
            self._fill_short(rpc, self.record)

        return run

    def _copy_fragment(self, rpc: ReplicaRpc, record: LogRecord, index: int, sources: list[str],
                       target: str) -> bool:
        """Copy closed fragment ``index`` of ``record`` (past truncation) from ``sources`` onto ``target``,
        CRC-checked; False if a truncation overtook the copy (the caller starts over)."""
        fragment = record.fragments[index]
        start = max(fragment.first, record.truncated + 1)
        end = record.fragment_end(index, 0)
        if start > end:
            return True
        try:
            self._copy_range(rpc, fragment, sources, start, end, replace(fragment, first=start), {target: start - 1})
        except DataCorruptionError:
            if self.record.truncated > record.truncated:
                return False  # truncated under the copy: the replicas dropped entries
            raise
        return True

    # -- bad copies ----------------------------------------------------------------------------------------
    def _bad_copy(self, fragment: Fragment, address: str, sequence: int, payload: bytes, crc: int) -> None:
        """A read met a bad copy of ``sequence`` on ``address`` and got ``payload`` from another replica:
        warn (once while its rewrite is pending) and leave the rewrite to the maintenance thread, out
        of the read's way."""
        with self._bad_lock:
            if (address, sequence) in self._bad_pending:
                return
            self._bad_pending.add((address, sequence))
        log.warning("log %s: replica %s holds a bad copy of entry %d (epoch %d): its payload fails the CRC-32C; "
                    "rewriting it from a good copy", self.log_name, address, sequence, fragment.epoch)
        self._jobs.put(self._rewrite_job(self._epoch, fragment, address, sequence, payload, crc))

    def _rewrite_job(self, epoch: int, fragment: Fragment, address: str, sequence: int, payload: bytes,
                     crc: int) -> Callable[[ReplicaRpc], None]:
        """Write the good copy over the bad one (same sequence and entry epoch, our fencing epoch, so a
        newer owner's fence refuses it), read it back, count it; a replica whose rewritten copy reads
        bad, at once or later, is failing."""

        def run(rpc: ReplicaRpc) -> None:
            try:
                truncated = self.record.truncated
                if self._epoch != epoch or not self._accepting or sequence <= truncated:
                    return
                timeout = self.config.request_timeout
                reply = rpc.call_one(address, {"op": "append", "log": self.log_name, "epoch": epoch,
                                               "entry_epoch": fragment.epoch, "first": fragment.first, "lac": 0,
                                               "truncated": truncated, "entries": [[sequence, crc]]},
                                     [payload], timeout)
                status = reply[0].get("status") if reply is not None else "no answer"
                if status == wire.FENCED:
                    raise DataLogWriterFencedError(f"log {self.log_name}: fenced while rewriting on {address}")
                if status == wire.STALE:
                    return  # a newer entry epoch took the sequence: the bad copy is gone
                if status != wire.OK:
                    log.warning("log %s: rewriting entry %d on replica %s failed: %s", self.log_name, sequence,
                                address, status)
                    return
                reply = rpc.call_one(address, {"op": "read", "log": self.log_name, "from": sequence, "to": sequence,
                                               "max_bytes": READ_CHUNK_BYTES}, [], timeout)
                if reply is None or reply[0].get("status") != wire.OK:
                    log.warning("log %s: replica %s did not answer the read-back of entry %d", self.log_name,
                                address, sequence)
                    return
                if int(reply[0].get("truncated", 0)) >= sequence:
                    return
                held = (reply[0]["entries"] == [[sequence, fragment.epoch, crc]] and len(reply[1]) == 1
                        and crc32c(reply[1][0]) == crc)
                repaired = self._repaired.setdefault(address, set())
                again = sequence in repaired
                if held:
                    repaired.add(sequence)
                    self.repairs += 1
                    log.info("log %s: entry %d rewritten on replica %s", self.log_name, sequence, address)
                if not held or again:
                    why = (f"answered a bad copy of entry {sequence} again after it was rewritten" if held
                           else f"still answers a bad copy of entry {sequence} after it was rewritten")
                    self._control.append(lambda: self._fail_replica(address, why))
                    self._wake()
            finally:
                with self._bad_lock:
                    self._bad_pending.discard((address, sequence))

        return run

    def _find_spare(self, rpc: ReplicaRpc, ensemble: tuple[str, ...], timeout: float) -> str | None:
        candidates = [a for a in self.config.replicas if a not in ensemble and a not in self._failed]
        candidates.sort(key=lambda a: a not in self._ensemble)  # current members first: known alive
        for address in candidates:
            reply = rpc.call_one(address, {"op": "last_confirmed", "log": self.log_name}, [], timeout)
            if reply is not None and reply[0].get("status") == wire.OK:
                return address
        return None
