"""The machine's own floor under a replicated append, beside Millrace's logs in the same run.

``--logs`` appenders each keep one append of ``--bytes`` in flight (librdkafka's idempotent producer
keeps one request in flight per partition, so the rows of ``compare`` race this latency):

- ``raw local``: one journal file in this process with group commit: what is queued goes out in one
  ``pwritev`` and one ``fdatasync``;
- ``raw 3 replicas``: each append sent over loopback TCP to three receiver processes, each reading it
  whole into a buffer and committing it to a journal as above before a 1-byte answer; done when the
  second answer is in (write quorum 3, ack quorum 2). Plain sockets, one system call per step: no
  framing, checksum or per-record work;
- ``millrace file`` and ``millrace replicated``: ``FileDurableDataLog`` and the replicated log over three
  ``millrace logd`` processes, appended through ``measure``.

The raw pair bounds what any three-replica design could do on this machine, whose one disk takes all
three replicas' writes and syncs, against a log on that disk. Each kind's CPU an append counts every
process it runs: this one, and the receivers or the logds. ``--parts`` adds the raw replicas with
the commit left out (the loopback transfers alone). ``--busy N`` keeps N cores spinning beside the runs,
as librdkafka's load generator does in the table's rows. Medians over ``--runs``, the kinds alternating.
The journals write a file allocated ahead and drop the pages they wrote, as the logs do.

The same ``measure`` appends through the replicated log over CURVE for the ``security`` scenario.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.harness import Replicas, Scenario, machine_floors, percentile
from millrace.store.durablelog.interface import DurableDataLog, LogAddress
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.fsutil import Buffer, drop_written

_LENGTH = struct.Struct("<I")
SPAN = 1024 * 1024 * 1024  # each journal file is allocated ahead, as the logs' files are
ANSWER = b"A"


@dataclass(frozen=True)
class Result:
    appends_per_s: float
    p50: float  # seconds
    p99: float
    cpu: float  # seconds of CPU an append, of every process the kind runs (this one included)


def result(latencies: list[float], elapsed: float, cpu: float) -> Result:
    ordered = sorted(latencies)
    return Result(len(ordered) / elapsed, percentile(ordered, 0.5), percentile(ordered, 0.99),
                  cpu / max(1, len(ordered)))


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


class Journal:
    """One file with group commit: what is queued is written with one ``pwritev`` and one ``fdatasync``,
    then each entry's ``done`` runs (on the journal's thread)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(self._fd, 0, SPAN)
        self._queue: list[tuple[Buffer, Callable[[], None]]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def submit(self, data: Buffer, done: Callable[[], None]) -> None:
        with self._ready:
            self._queue.append((data, done))
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()
        os.close(self._fd)
        os.unlink(self._path)

    def _run(self) -> None:
        offset = 0
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            size = sum(len(data) for data, _ in batch)
            if offset + size > SPAN:
                offset = 0
            os.pwritev(self._fd, [data for data, _ in batch], offset)
            os.fdatasync(self._fd)
            drop_written(self._fd, offset, offset + size)  # as the logs do: fresh pages cost, kept ones grow
            offset += size
            for _, done in batch:
                done()


def _read_exactly(conn: socket.socket, length: int) -> bytearray | None:
    buffer = bytearray(length)
    view = memoryview(buffer)
    got = 0
    while got < length:
        n = conn.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buffer


def _serve(conn: socket.socket, journal: Journal | None) -> None:
    """Read whole entries off one sender's connection; answer each once committed (or at once)."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = _read_exactly(conn, _LENGTH.size)
            if head is None:
                return
            entry = _read_exactly(conn, _LENGTH.unpack(head)[0])
            if entry is None:
                return
            if journal is None:
                conn.sendall(ANSWER)
            else:
                journal.submit(entry, lambda: conn.sendall(ANSWER))
    except OSError:  # the sender is done
        return


def receiver(path: str, senders: int, commit: bool, port_out: multiprocessing.SimpleQueue,
             cpu_out: multiprocessing.SimpleQueue) -> None:
    """A replica: accept ``senders`` connections and serve each; with ``commit``, through one journal.
    Puts the CPU it used from the first connection on."""
    listener = socket.create_server(("127.0.0.1", 0))
    port_out.put(listener.getsockname()[1])
    journal = Journal(path) if commit else None
    threads = []
    began = 0.0
    for _ in range(senders):
        conn, _ = listener.accept()
        began = began or _own_cpu()
        threads.append(threading.Thread(target=_serve, args=(conn, journal), daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join()
    if journal is not None:
        journal.close()
    cpu_out.put(_own_cpu() - began)


def _appenders(logs: int, seconds: float, append_one: Callable[[int], None]) -> tuple[list[float], float]:
    """``logs`` threads each calling ``append_one(index)`` back to back for ``seconds``: the latencies,
    and the seconds until the last append was done."""
    latencies: list[list[float]] = [[] for _ in range(logs)]
    start = time.perf_counter()
    deadline = start + seconds

    def loop(index: int) -> None:
        mine = latencies[index]
        while (began := time.perf_counter()) < deadline:
            append_one(index)
            mine.append(time.perf_counter() - began)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(logs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [x for xs in latencies for x in xs], time.perf_counter() - start


def raw_local(directory: str, size: int, logs: int, seconds: float) -> Result:
    journal = Journal(os.path.join(directory, "local.journal"))
    block = os.urandom(size)

    def append_one(_index: int) -> None:
        done = threading.Event()
        journal.submit(block, done.set)
        done.wait()

    try:
        began = _own_cpu()
        latencies, elapsed = _appenders(logs, seconds, append_one)
        return result(latencies, elapsed, _own_cpu() - began)
    finally:
        journal.close()


def raw_replicated(directory: str, size: int, logs: int, seconds: float, commit: bool = True,
                   replicas: int = 3, quorum: int = 2) -> Result:
    context = multiprocessing.get_context("spawn")
    ports: multiprocessing.SimpleQueue = context.SimpleQueue()
    cpus: multiprocessing.SimpleQueue = context.SimpleQueue()
    procs = [context.Process(target=receiver, args=(os.path.join(directory, f"replica{i}.journal"), logs,
                                                    commit, ports, cpus))
             for i in range(replicas)]
    for proc in procs:
        proc.start()
    addresses = [("127.0.0.1", ports.get()) for _ in procs]
    links: list[list[socket.socket]] = []
    for _ in range(logs):
        links.append([socket.create_connection(address) for address in addresses])
        for conn in links[-1]:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message = _LENGTH.pack(size) + os.urandom(size)
    sent = [0] * logs
    answers = [dict.fromkeys(conns, 0) for conns in links]  # a replica answers in order: a count says which
    selectors_ = [selectors.DefaultSelector() for _ in range(logs)]
    for selector, conns in zip(selectors_, links, strict=True):
        for conn in conns:
            selector.register(conn, selectors.EVENT_READ)

    def append_one(index: int) -> None:
        for conn in links[index]:
            conn.sendall(message)
        sent[index] += 1
        mine = answers[index]
        while sum(count >= sent[index] for count in mine.values()) < quorum:
            for key, _ in selectors_[index].select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                mine[sock] += len(sock.recv(64))

    try:
        began = _own_cpu()
        latencies, elapsed = _appenders(logs, seconds, append_one)
        cpu = _own_cpu() - began
    finally:
        for conns in links:
            for conn in conns:
                conn.close()
        for proc in procs:
            proc.join(30)
    return result(latencies, elapsed, cpu + sum(cpus.get() for _ in procs))


def replication_floor(directory: str, size: int, seconds: float = 2.0) -> float:
    """Raw three replicas' append rate over one raw journal's, one ``size``-byte append in flight."""
    return (raw_replicated(directory, size, 1, seconds).appends_per_s
            / raw_local(directory, size, 1, seconds).appends_per_s)


@dataclass(frozen=True)
class LogRun:
    appends_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float


def measure(log: DurableDataLog, entry_bytes: int, appenders: int, window: int, seconds: float) -> LogRun:
    """Appends to an opened log from ``appenders`` threads, each keeping up to ``window`` appends in
    flight; latency is append() to the future's completion."""
    payload = os.urandom(entry_bytes)
    latencies: list[list[float]] = [[] for _ in range(appenders)]
    counts = [0] * appenders
    barrier = threading.Barrier(appenders + 1)
    stop_at = [0.0]
    clock = time.perf_counter

    def appender(index: int) -> None:
        mine = latencies[index]
        inflight: list[tuple[float, Future[LogAddress]]] = []
        barrier.wait()
        while clock() < stop_at[0]:
            inflight.append((clock(), log.append(payload)))
            if len(inflight) >= window:
                started, future = inflight.pop(0)
                future.result(60)
                mine.append(clock() - started)
                counts[index] += 1
        for started, future in inflight:
            future.result(60)
            mine.append(clock() - started)
            counts[index] += 1

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for t in threads:
        t.start()
    began = clock()
    stop_at[0] = began + seconds
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = clock() - began
    flat = sorted(x for xs in latencies for x in xs)
    total = sum(counts)
    return LogRun(total / elapsed, total * entry_bytes / elapsed / 1e6, percentile(flat, 0.5) * 1000,
                  percentile(flat, 0.99) * 1000)


def millrace_log(kind: str, directory: Path, replicas: Replicas) -> Callable[[int, int, float], Result]:
    """A run appending through Millrace's file log or its replicated log, ``logs`` appenders on one log."""
    processes = [psutil.Process(logd.proc.pid) for logd in replicas.logds
                 if logd.proc is not None and kind == "replicated"]

    def cpu() -> float:
        return _own_cpu() + sum(sum(process.cpu_times()[:2]) for process in processes)

    def run(size: int, logs: int, seconds: float) -> Result:
        name = f"{kind}{time.monotonic_ns()}"
        log = FileDurableDataLog(str(directory / name)) if kind == "file" else replicas.log(name)
        log.open()
        try:
            began = cpu()
            measured = measure(log, size, logs, 1, seconds)
            used = cpu() - began
        finally:
            log.close()
        return Result(measured.appends_per_s, measured.p50_ms / 1e3, measured.p99_ms / 1e3,
                      used / max(1.0, measured.appends_per_s * seconds))
    return run


def add_floor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bytes", type=int, default=1024 * 1024)
    parser.add_argument("--logs", type=int, default=1, help="appenders, each with one append in flight")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside the runs")
    parser.add_argument("--dir", default=None, help="where the journals go (default: a temporary directory)")
    parser.add_argument("--parts", action="store_true", help="also the raw replicas without their commit")


def run_floor(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(dir=args.dir))
    floors = machine_floors(str(root))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    replicas = Replicas(root / "logds", 3).start()
    home = str(root)
    kinds: dict[str, Callable[[int, int, float], Result]] = {
        "raw local": lambda size, logs, seconds: raw_local(home, size, logs, seconds),
        "raw 3 replicas": lambda size, logs, seconds: raw_replicated(home, size, logs, seconds),
        "millrace file": millrace_log("file", root, replicas),
        "millrace replicated": millrace_log("replicated", root, replicas)}
    if args.parts:
        kinds["raw 3 replicas, no commit"] = lambda size, logs, seconds: raw_replicated(
            home, size, logs, seconds, commit=False)
    results: dict[str, list[Result]] = {kind: [] for kind in kinds}
    try:
        for _ in range(args.runs):
            for kind, run in kinds.items():
                results[kind].append(run(args.bytes, args.logs, args.seconds))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        replicas.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.bytes:,}-byte appends, {args.logs} appender(s) with one in flight each, {args.busy} core(s) "
          f"kept busy; medians of {args.runs} runs")
    print(f"{'':27}{'appends/s':>10}{'MB/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'CPU ms':>8}  runs' appends/s")
    medians: dict[str, dict[str, float]] = {}
    for kind, runs in results.items():
        rate = statistics.median(r.appends_per_s for r in runs)
        medians[kind] = {"appends_per_s": rate, "p50_ms": statistics.median(r.p50 for r in runs) * 1e3,
                         "p99_ms": statistics.median(r.p99 for r in runs) * 1e3,
                         "cpu_ms_per_append": statistics.median(r.cpu for r in runs) * 1e3}
        each = ", ".join(f"{r.appends_per_s:,.0f}" for r in runs)
        m = medians[kind]
        print(f"{kind:27}{rate:10,.0f}{rate * args.bytes / 1e6:8.0f}{m['p50_ms']:8.2f}{m['p99_ms']:8.2f}"
              f"{m['cpu_ms_per_append']:8.2f}  {each}")
    ratios = {"raw": medians["raw 3 replicas"]["appends_per_s"] / medians["raw local"]["appends_per_s"],
              "millrace": medians["millrace replicated"]["appends_per_s"] / medians["millrace file"]["appends_per_s"]}
    print(f"replicated / local: raw {ratios['raw']:.2f}, millrace {ratios['millrace']:.2f}")
    return {"floors": floors, "medians": medians, "replicated_over_local": ratios}


SCENARIOS = [Scenario("floor", "one journal and three replicas with no Millrace code, beside Millrace's file and "
                      "replicated logs", add_floor_arguments, run_floor, __doc__ or "")]
