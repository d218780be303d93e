"""Keeping a replicated log's copies whole in the background: the maintenance thread (BookKeeper's
LedgerFragmentReplicator, with its auditor's periodic check run by the owner itself).

Its jobs, run one at a time in order:

- ``repair(failed)``: copy every closed fragment a replaced replica is in onto a spare (read from the
  others, CRC-checked), then record the swap in the fragment's ensemble.
- the periodic check, every ``probe_interval``: while the current ensemble is short of the write
  quorum, ask the replicas outside it and have the writer grow it with the first that answers (a
  failed one only after its hold-off); else copy each closed fragment written while the ensemble was
  short onto one more replica and record the addition.
- ``rejoin(joined)``: top a returned replica up on the closed fragments that list it (it may lack
  their tail), then fill the short fragments as above.
- ``bad_copy(...)``: a read met a replica's bad copy of an entry; write the good copy over it, read it
  back, count it in ``repairs``. A replica whose rewritten copy reads bad, at once or later, is
  handed to the writer as failing, like a replica that answers errors.
- ``truncate(upto)``: send a recorded truncation to every replica the record lists.

Threads: one maintenance thread per open log runs every job with its own ``ReplicaRpc``; ``repair``,
``rejoin``, ``truncate`` and ``bad_copy`` only queue a job and may be called from any thread (the
writer's I/O thread, ``open``, a reader). This module owns the job queue, the bad-copy bookkeeping
and ``repairs``. It reaches the writer only through ``RepairHost`` and changes the metadata only
through the ``OwnedRecord``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import zmq
from crc32c import crc32c

from millrace.store.durablelog.fragment_copy import READ_CHUNK_BYTES, FragmentCopier
from millrace.store.durablelog.metadata import Fragment, LogRecord, OwnedRecord
from millrace.store.durablelog.replica_rpc import ReplicaRpc
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.errors import DataCorruptionError, DataLogWriterFencedError
from millrace.store.logd import wire

log = logging.getLogger(__name__)

Job = Callable[[ReplicaRpc], None]


class RepairHost(Protocol):
    """What the maintenance thread needs from the log's writer.

    The queries run on the maintenance thread and read state the writer's I/O thread (or ``open`` and
    ``close``) writes, each one atomic read (an attribute, a dict or set lookup; the ensemble list is
    replaced whole, never changed in place): an answer may be a moment stale,
    which can delay or reorder a repair but not corrupt one (every change it leads to is a
    compare-and-set, or is re-checked by the I/O thread). The requests never act on the maintenance
    thread: they hand the work to the I/O thread, which owns the ensemble.
    """

    @property
    def accepting(self) -> bool:
        """The log is open and not closing."""

    @property
    def broken(self) -> bool:
        """The log failed (fenced, or too few replicas left): nothing more to repair."""

    def current_ensemble(self) -> Sequence[str]:
        """The current fragment's replicas, as the I/O thread writes to them."""

    def has_failed(self, address: str) -> bool:
        """The writer replaced ``address`` and has not taken it back."""

    def may_rejoin(self, address: str, now: float) -> bool:
        """``address`` never failed, or its hold-off has passed."""

    def request_grow(self, address: str) -> None:
        """Ask the I/O thread to add ``address`` (it just answered) to an ensemble that shrank."""

    def request_failure(self, address: str, why: str) -> None:
        """Ask the I/O thread to treat ``address`` as failing (replace it or swap it out)."""


class ReplicaRepair:
    """The maintenance thread of one replicated log and the jobs it runs."""

    def __init__(self, owned: OwnedRecord, config: ReplicationConfig, context: zmq.Context[Any],
                 host: RepairHost) -> None:
        self._owned = owned
        self._config = config
        self._context = context
        self._host = host
        self.copier = FragmentCopier(owned, config, self.bad_copy)
        self._thread: threading.Thread | None = None
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self.repairs = 0  # bad copies of entries rewritten from a good one
        self._bad_lock = threading.Lock()
        self._bad_pending: set[tuple[str, int]] = set()  # (replica, sequence) bad copies awaiting rewrite
        self._repaired: dict[str, set[int]] = {}  # replica: sequences rewritten on it by this owner

    @property
    def _log_name(self) -> str:
        return self._owned.log_name

    # -- the thread ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the maintenance thread for a newly opened log (jobs queued before it run first)."""
        self._repaired = {}
        self._thread = threading.Thread(target=self._run, name=f"log-repair:{self._log_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let the running job finish, then end the thread (jobs still queued wait for the next open)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        rpc = ReplicaRpc(self._context, self._config.curve)
        next_check = time.monotonic() + self._config.probe_interval
        try:
            while True:
                job: Job | None
                try:
                    job = self._jobs.get(timeout=max(0.0, next_check - time.monotonic()))
                except queue.Empty:
                    job = self._check_ensembles
                if job is None:
                    return
                if time.monotonic() >= next_check:  # due even while truncations keep the queue busy
                    next_check = time.monotonic() + self._config.probe_interval
                    if job != self._check_ensembles:  # (a bound method is a new object each time)
                        self._jobs.put(self._check_ensembles)
                try:
                    job(rpc)
                except DataLogWriterFencedError as exc:
                    log.warning("log %s: maintenance stopped: %s", self._log_name, exc)
                    return
                except Exception:  # noqa: BLE001 - a failed repair is tried again by the next check or replacement
                    log.exception("log %s: maintenance job failed", self._log_name)
        finally:
            rpc.close()

    # -- jobs, queued from any thread ----------------------------------------------------------------------
    def truncate(self, upto: int) -> None:
        """Send the recorded truncation at ``upto`` to every replica of the record."""

        def run(rpc: ReplicaRpc) -> None:
            members = {a for f in self._owned.record.fragments for a in f.ensemble}
            rpc.call({a: ({"op": "truncate", "log": self._log_name, "epoch": self._owned.epoch, "upto": upto}, [])
                      for a in members}, self._config.request_timeout)

        self._jobs.put(run)

    def repair(self, failed: str) -> None:
        """Copy every closed fragment ``failed`` belongs to onto a spare, then record the swap."""

        def run(rpc: ReplicaRpc) -> None:
            while self._host.accepting:
                record = self._owned.record
                index = next((i for i, f in enumerate(record.fragments[:-1]) if failed in f.ensemble), None)
                if index is None:
                    return
                fragment = record.fragments[index]
                spare = self._find_spare(rpc, fragment.ensemble, self._config.request_timeout)
                if spare is None:
                    log.warning("log %s: no spare replica to take %s's place in fragment %d", self._log_name,
                                failed, fragment.first)
                    return
                if not self._copy_fragment(rpc, record, index, [a for a in fragment.ensemble if a != failed], spare):
                    continue

                def swap(r: LogRecord, first: int = fragment.first, spare: str = spare) -> LogRecord:
                    return r.with_changed(first, lambda g: replace(
                        g, ensemble=tuple(spare if a == failed else a for a in g.ensemble)))

                self._owned.change(swap)
                log.info("log %s: fragment %d re-replicated from %s to %s", self._log_name, fragment.first,
                         failed, spare)

        self._jobs.put(run)

    def rejoin(self, joined: str) -> None:
        """Top up a replica that came back on the closed fragments that still list it (it may lack what
        they got after it stopped answering), then fill the fragments written while it was away."""

        def run(rpc: ReplicaRpc) -> None:
            firsts = [f.first for f in self._owned.record.fragments[:-1] if joined in f.ensemble]
            for first in firsts:
                while self._host.accepting:
                    record = self._owned.record
                    index = next((i for i, f in enumerate(record.fragments[:-1]) if f.first == first), None)
                    if index is None or joined not in record.fragments[index].ensemble:
                        break  # truncated away, or swapped for a spare meanwhile
                    sources = [a for a in record.fragments[index].ensemble if a != joined]
                    if self._copy_fragment(rpc, record, index, sources, joined):
                        break
            self._fill_short(rpc, self._owned.record)

        self._jobs.put(run)

    def bad_copy(self, fragment: Fragment, address: str, sequence: int, payload: bytes, crc: int) -> None:
        """A read met a bad copy of ``sequence`` on ``address`` and got ``payload`` from another replica:
        warn (once while its rewrite is pending) and leave the rewrite to the maintenance thread, out
        of the read's way."""
        with self._bad_lock:
            if (address, sequence) in self._bad_pending:
                return
            self._bad_pending.add((address, sequence))
        log.warning("log %s: replica %s holds a bad copy of entry %d (epoch %d): its payload fails the CRC-32C; "
                    "rewriting it from a good copy", self._log_name, address, sequence, fragment.epoch)
        self._jobs.put(self._rewrite_job(self._owned.epoch, fragment, address, sequence, payload, crc))

    # -- on the maintenance thread -------------------------------------------------------------------------
    @property
    def _probe_timeout(self) -> float:
        """How long the periodic check waits for a replica's answer (a dead one must not hold it long)."""
        return min(self._config.request_timeout, max(self._config.probe_interval, 0.5))

    def _check_ensembles(self, rpc: ReplicaRpc) -> None:
        """Every ``probe_interval``: grow a current ensemble that shrank back to the write quorum with a
        replica that answers, else bring closed fragments written while it was short up to it."""
        record = self._owned.record
        if not self._host.accepting or self._host.broken or not record.fragments:
            return
        current = record.fragments[-1].ensemble
        if len(current) < self._config.write_quorum:
            now = time.monotonic()
            # The replicas that never failed first; a failed one only once its hold-off has passed.
            candidates = sorted((a for a in self._config.replicas if a not in current
                                 and self._host.may_rejoin(a, now)), key=self._host.has_failed)
            timeout = self._probe_timeout
            replies = rpc.call({a: ({"op": "last_confirmed", "log": self._log_name}, []) for a in candidates},
                               timeout)
            joining = next((a for a in candidates if replies.get(a, ({}, []))[0].get("status") == wire.OK), None)
            if joining is not None:
                self._host.request_grow(joining)
            return
        self._fill_short(rpc, record)

    def _fill_short(self, rpc: ReplicaRpc, record: LogRecord) -> None:
        """Copy each closed fragment held by fewer than ``write_quorum`` replicas (written while the
        ensemble was short) onto one more replica, then record it in the fragment's ensemble."""
        timeout = self._probe_timeout
        while self._host.accepting:
            index = next((i for i, f in enumerate(record.fragments[:-1])
                          if len(f.ensemble) < self._config.write_quorum), None)
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

                self._owned.change(add)
                log.info("log %s: fragment %d copied to %s (it was held by %d replicas)", self._log_name,
                         fragment.first, target, len(fragment.ensemble))
            record = self._owned.record

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
            self.copier.copy(rpc, fragment, sources, start, end, replace(fragment, first=start), {target: start - 1})
        except DataCorruptionError:
            if self._owned.record.truncated > record.truncated:
                return False  # truncated under the copy: the replicas dropped entries
            raise
        return True

    def _rewrite_job(self, epoch: int, fragment: Fragment, address: str, sequence: int, payload: bytes,
                     crc: int) -> Job:
        """Write the good copy over the bad one (same sequence and entry epoch, our fencing epoch, so a
        newer owner's fence refuses it), read it back, count it; a replica whose rewritten copy reads
        bad, at once or later, is failing."""

        def run(rpc: ReplicaRpc) -> None:
            try:
                truncated = self._owned.record.truncated
                if self._owned.epoch != epoch or not self._host.accepting or sequence <= truncated:
                    return
                timeout = self._config.request_timeout
                reply = rpc.call_one(address, {"op": "append", "log": self._log_name, "epoch": epoch,
                                               "entry_epoch": fragment.epoch, "first": fragment.first, "lac": 0,
                                               "truncated": truncated, "entries": [[sequence, crc]]},
                                     [payload], timeout)
                status = reply[0].get("status") if reply is not None else "no answer"
                if status == wire.FENCED:
                    raise DataLogWriterFencedError(f"log {self._log_name}: fenced while rewriting on {address}")
                if status == wire.STALE:
                    return  # a newer entry epoch took the sequence: the bad copy is gone
                if status != wire.OK:
                    log.warning("log %s: rewriting entry %d on replica %s failed: %s", self._log_name, sequence,
                                address, status)
                    return
                reply = rpc.call_one(address, {"op": "read", "log": self._log_name, "from": sequence,
                                               "to": sequence, "max_bytes": READ_CHUNK_BYTES}, [], timeout)
                if reply is None or reply[0].get("status") != wire.OK:
                    log.warning("log %s: replica %s did not answer the read-back of entry %d", self._log_name,
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
                    log.info("log %s: entry %d rewritten on replica %s", self._log_name, sequence, address)
                if not held or again:
                    why = (f"answered a bad copy of entry {sequence} again after it was rewritten" if held
                           else f"still answers a bad copy of entry {sequence} after it was rewritten")
                    self._host.request_failure(address, why)
            finally:
                with self._bad_lock:
                    self._bad_pending.discard((address, sequence))

        return run

    def _find_spare(self, rpc: ReplicaRpc, ensemble: tuple[str, ...], timeout: float) -> str | None:
        current = self._host.current_ensemble()
        candidates = [a for a in self._config.replicas if a not in ensemble and not self._host.has_failed(a)]
        candidates.sort(key=lambda a: a not in current)  # current members first: known alive
        for address in candidates:
            reply = rpc.call_one(address, {"op": "last_confirmed", "log": self._log_name}, [], timeout)
            if reply is not None and reply[0].get("status") == wire.OK:
                return address
        return None
