"""The log replica's server: one thread, one ZeroMQ ROUTER socket, one journal.

Each turn drains every request waiting on the socket, validates them against the replica's state,
writes the records they produce (entries, fences, truncations, last-confirmed marks) with one journal
write and one fdatasync, and only then answers them: an append or fence is acknowledged only once it
is durable, and requests arriving during the fsync form the next turn's batch (group commit). Reads
and last-confirmed queries answer from durable state at once.

An append is refused (``fenced``) when its epoch is older than the newest fence this replica has seen
for the log, so once a new owner's fence is durable here no older owner's entry is accepted. An entry
is accepted only after its predecessor of the same entry epoch (or at the start its writer names, or
right after the truncation point), so what a replica holds of one owner's run is always a prefix: a
message lost while a connection was down shows up as ``gap``, never as a hole.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import zmq
from crc32c import crc32c

from millrace.store.durablelog.curve import CurveKeyError, CurveServerKeys
from millrace.store.durablelog.zmq_frames import readable, recv_frames, send_frames
from millrace.store.logd import wire
from millrace.store.logd.journal import Journal, LogState, Record, StoredEntry, entry_record, value_record
from millrace.store.process_output import print_line

log = logging.getLogger(__name__)

# Bounds one turn so a flood of appends still gets acknowledged in steps.
MAX_TURN_BYTES = 32 * 1024 * 1024
MAX_TURN_REQUESTS = 4096


@dataclass
class _Turn:
    """What one turn writes and whom it answers afterwards."""

    records: list[tuple[str, int, StoredEntry | None, Record, int]] = field(default_factory=list)
    after_write: list[Any] = field(default_factory=list)  # callables producing (identity, reply frames)
    overlay: dict[tuple[str, int], int] = field(default_factory=dict)  # entries of this turn: epoch
    confirmed: dict[str, int] = field(default_factory=dict)
    truncations: dict[str, int] = field(default_factory=dict)


class LogReplicaServer:
    def __init__(self, data_dir: str, host: str = "127.0.0.1", port: int = 0,
                 max_file_bytes: int | None = None, curve: CurveServerKeys | None = None) -> None:
        self.journal = Journal(data_dir) if max_file_bytes is None else Journal(data_dir, max_file_bytes)
        self._context: zmq.Context[Any] = zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # With CURVE, a client whose key is not authorized never gets past the handshake: no request of
        # it reaches this server's loop.
        self._authenticator = curve.serve(self._context, self._socket) if curve is not None else None
        self._host = host
        self._requested_port = port
        self.port = 0
        self._stopping = threading.Event()

    def start(self) -> int:
        """Replay the journal, bind, and return the bound port."""
        self.journal.open()
        if self._requested_port == 0:
            self.port = self._socket.bind_to_random_port(f"tcp://{self._host}")
        else:
            self._socket.bind(f"tcp://{self._host}:{self._requested_port}")
            self.port = self._requested_port
        return self.port

    def stop(self) -> None:
        self._stopping.set()

    def serve_forever(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                if poller.poll(200):
                    self._turn()
        finally:
            self._socket.close(0)
            if self._authenticator is not None:
                self._authenticator.stop()
            self.journal.close()

    # -- one turn ----------------------------------------------------------------------------------------
    def _turn(self) -> None:
        turn = _Turn()
        immediate: list[list[Any]] = []
        size = 0
        socket = self._socket
        for _ in range(MAX_TURN_REQUESTS):
            if not readable(socket):
                break
            frames = recv_frames(socket, copy=False)
            identity, header_frame, payloads = frames[0], frames[1], frames[2:]
            size += sum(len(p.buffer) for p in payloads)
            request: dict[str, Any] = {}
            try:
                request = wire.decode_header(header_frame.buffer)
                reply = self._handle(request, [p.buffer for p in payloads], turn)  # no copy: written as they are
            except (ValueError, KeyError, TypeError) as exc:
                reply = ({"status": wire.BAD_REQUEST, "error": repr(exc)}, [])
            if reply is not None:
                head, data = reply
                head.setdefault("id", request.get("id"))
                immediate.append([identity, wire.encode_header(head), *data])
            else:
                turn.after_write[-1] = (identity, turn.after_write[-1])
            if size >= MAX_TURN_BYTES:
                break
        self.journal.write(turn.records)
        for name, upto in turn.truncations.items():
            self.journal.truncate(self.journal.log(name), upto)
        for name, lac in turn.confirmed.items():
            state = self.journal.log(name)
            state.last_confirmed = max(state.last_confirmed, lac)
        for identity, answer in turn.after_write:
            head, data = answer()
            send_frames(socket, [identity, wire.encode_header(head), *data])
        for message in immediate:
            send_frames(socket, message)

    def _handle(self, request: dict[str, Any], payloads: list[memoryview], turn: _Turn) -> tuple[dict[str, Any], list[bytes]] | None:
        """Immediate answer, or None after queueing an answer for after the turn's fsync."""
        op = request["op"]
        request_id = request["id"]
        name = request["log"]
        if not isinstance(name, str) or not name:
            raise ValueError("log must be a non-empty string")
        state = self.journal.log(name)
        if op == "append":
            return self._append(request_id, name, state, request, payloads, turn)
        if op == "fence":
            return self._fence(request_id, name, state, request, turn)
        if op == "read":
            return self._read(request_id, name, state, int(request["from"]), int(request["to"]),
                              int(request["max_bytes"]))
        if op == "truncate":
            epoch, upto = int(request["epoch"]), int(request["upto"])
            if epoch < state.fenced:
                return {"id": request_id, "status": wire.FENCED, "fenced": state.fenced}, []
            self._note_truncation(name, state, upto, turn)
            turn.after_write.append(lambda: ({"id": request_id, "status": wire.OK}, []))
            return None
        if op == "last_confirmed":
            last = max(state.entries, default=state.truncated)
            return {"id": request_id, "status": wire.OK, "lac": state.last_confirmed, "last": last,
                    "fenced": state.fenced, "truncated": state.truncated}, []
        raise ValueError(f"unknown op {op!r}")

    def _append(self, request_id: int, name: str, state: LogState, request: dict[str, Any],
                payloads: list[memoryview], turn: _Turn) -> tuple[dict[str, Any], list[bytes]] | None:
        epoch, entry_epoch, first = int(request["epoch"]), int(request["entry_epoch"]), int(request["first"])
        entries = request["entries"]
        if epoch < state.fenced:
            return {"id": request_id, "status": wire.FENCED, "fenced": state.fenced}, []
        if len(entries) != len(payloads):
            raise ValueError("an append needs one payload frame per entry")
        # The writer's truncation point, so entries it copies past a truncation leave no hole here.
        truncated = self._note_truncation(name, state, int(request.get("truncated", 0)), turn)
        overlay = turn.overlay
        accepted: list[tuple[int, int, memoryview]] = []
        for (sequence, crc), payload in zip(entries, payloads, strict=True):
            if crc32c(payload) != crc:
                return {"id": request_id, "status": wire.CORRUPT, "sequence": sequence}, []
            if sequence <= truncated:
                continue  # already truncated away: nothing to keep, nothing to refuse
            previous = sequence - 1
            held = overlay.get((name, previous))
            if held is None and previous in state.entries:
                held = state.entries[previous].entry_epoch
            if not (sequence == first or previous <= truncated or held == entry_epoch):
                return {"id": request_id, "status": wire.GAP, "sequence": sequence}, []
            existing = overlay.get((name, sequence))
            if existing is None and sequence in state.entries:
                existing = state.entries[sequence].entry_epoch
            if existing is not None and existing > entry_epoch:
                return {"id": request_id, "status": wire.STALE, "sequence": sequence}, []
            overlay[(name, sequence)] = entry_epoch
            accepted.append((sequence, crc, payload))
        for sequence, crc, payload in accepted:
            record, payload_offset = entry_record(name, sequence, entry_epoch, crc, payload)
            stored = StoredEntry(entry_epoch, 0, 0, len(payload), crc)
            turn.records.append((name, sequence, stored, record, payload_offset))
        lac = int(request.get("lac", 0))
        if lac > max(state.last_confirmed, turn.confirmed.get(name, 0)):
            turn.records.append((name, 0, None, value_record(b"L", name, lac), 0))
            turn.confirmed[name] = lac
        last = entries[-1][0] if entries else 0
        turn.after_write.append(lambda: ({"id": request_id, "status": wire.OK, "last": last}, []))
        return None

    @staticmethod
    def _note_truncation(name: str, state: LogState, upto: int, turn: _Turn) -> int:
        """Record a truncation point this turn; returns the point in force for this turn's checks."""
        known = max(state.truncated, turn.truncations.get(name, 0))
        if upto > known:
            turn.records.append((name, 0, None, value_record(b"T", name, upto), 0))
            turn.truncations[name] = upto
            return upto
        return known

    def _fence(self, request_id: int, name: str, state: LogState, request: dict[str, Any],
               turn: _Turn) -> tuple[dict[str, Any], list[bytes]] | None:
        epoch = int(request["epoch"])
        if epoch < state.fenced:
            return {"id": request_id, "status": wire.FENCED, "fenced": state.fenced}, []
        self._note_truncation(name, state, int(request.get("truncated", 0)), turn)
        if epoch > state.fenced:
            turn.records.append((name, 0, None, value_record(b"F", name, epoch), 0))
            state.fenced = epoch  # at once: later appends of this turn from older epochs are refused
        first, entry_epoch = int(request["first"]), int(request["entry_epoch"])

        def answer() -> tuple[dict[str, Any], list[bytes]]:
            # After the write, so the answer counts every entry accepted before the fence.
            return {"id": request_id, "status": wire.OK, "last": state.prefix_end(first, entry_epoch),
                    "lac": state.last_confirmed, "truncated": state.truncated}, []

        turn.after_write.append(answer)
        return None

    def _read(self, request_id: int, name: str, state: LogState, start: int, end: int,
              max_bytes: int) -> tuple[dict[str, Any], list[bytes]]:
        """Durable entries start..end (bounded by ``max_bytes``). An entry whose payload no longer
        matches its CRC-32C (the disk changed it under the journal; the frame CRC is only checked at
        replay) ends the answer as ``corrupt`` [sequence, entry epoch] instead of being sent: the
        owner then takes it from another replica and rewrites it here."""
        listed: list[list[int]] = []
        data: list[bytes] = []
        answer: dict[str, Any] = {"id": request_id, "status": wire.OK, "entries": listed, "truncated": state.truncated}
        size = 0
        for sequence in range(max(start, state.truncated + 1), end + 1):
            stored = state.entries.get(sequence)
            if stored is None:
                continue
            if data and size + stored.length > max_bytes:
                break
            payload = self.journal.read(stored)
            if crc32c(payload) != stored.crc:
                log.warning("log %s: entry %d (epoch %d) at byte %d of journal file %d does not match its "
                            "CRC-32C: answered as corrupt", name, sequence, stored.entry_epoch, stored.offset,
                            stored.file_id)
                answer["corrupt"] = [sequence, stored.entry_epoch]
                break
            listed.append([sequence, stored.entry_epoch, stored.crc])
            data.append(payload)
            size += stored.length
        return answer, data


def run_logd(data_dir: str, host: str, port: int, curve_secret_key: str | None = None,
             curve_authorized_keys: str | None = None) -> int:
    """The ``millrace logd`` process: serve until SIGINT/SIGTERM (with CURVE when given its keys)."""
    curve = None
    if curve_secret_key or curve_authorized_keys:
        if not (curve_secret_key and curve_authorized_keys):
            print("millrace: --curve-secret-key and --curve-authorized-keys go together", file=sys.stderr, flush=True)
            return 2
        try:
            curve = CurveServerKeys.load(curve_secret_key, curve_authorized_keys)
        except CurveKeyError as e:
            print(f"millrace: {e}", file=sys.stderr, flush=True)
            return 2
    server = LogReplicaServer(data_dir, host, port, curve=curve)
    bound = server.start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    print_line(f"millrace: logd listening on {host}:{bound}{' (CURVE)' if curve else ''}")
    print_line(f"millrace: ready (logd journal {server.journal.directory})")
    server.serve_forever()
    print_line("millrace: stopped cleanly")
    return 0
