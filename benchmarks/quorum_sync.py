"""The machine's own floor under the replicated produce latency: three journals on this disk, each
writing and syncing what one produce request carries, acknowledged by the second of the three.

Each writer is a process like a logd: a file allocated ahead, ``pwrite`` of ``--bytes`` and one
``fdatasync``, ``--rate`` times a second, all three on the same schedule. A round's quorum latency is
its second-fastest sync (write quorum 3, ack quorum 2). ``--busy N`` runs N processes spinning on the
CPU beside them, as the load generator, the server and the replicas keep the cores busy in the
latency row of ``benchmarks.compare``: a sync that completes must still wait for a core to return to.
No Millrace code runs: this is the disk and the scheduler alone.

    .venv/bin/python -m benchmarks.quorum_sync [--dir D] [--bytes 280000] [--rate 200] [--seconds 10] [--busy 0]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from multiprocessing.queues import Queue

from benchmarks.store_append_bench import percentile

MIB = 1024 * 1024
PERCENTILES = (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))


def journal(path: str, size: int, rate: float, seconds: float, start: float, out: Queue) -> None:
    """Write and sync ``size`` bytes ``rate`` times a second from ``start``; put the syncs' latencies."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    span = 256 * MIB
    os.posix_fallocate(fd, 0, span)
    block = os.urandom(size)
    latencies: list[float] = []
    offset = 0
    rounds = int(rate * seconds)
    for n in range(rounds):
        delay = start + n / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        began = time.perf_counter()
        os.pwrite(fd, block, offset)
        os.fdatasync(fd)
        latencies.append(time.perf_counter() - began)
        offset = (offset + size) % (span - size)
    os.close(fd)
    os.unlink(path)
    out.put(latencies)


def spin(until: float) -> None:
    while time.time() < until:
        pass


def quorum_latencies(directory: str, size: int, rate: float, seconds: float, busy: int,
                     writers: int = 3, quorum: int = 2) -> list[float]:
    """Each round's ``quorum``-th fastest sync of ``writers`` journals, in seconds."""
    context = multiprocessing.get_context("spawn")
    out: Queue = context.Queue()
    start = time.time() + 1.0  # every process started before the first round
    with tempfile.TemporaryDirectory(dir=directory) as work:
        procs = [context.Process(target=journal, args=(os.path.join(work, f"journal-{i}"), size, rate, seconds,
                                                       start, out)) for i in range(writers)]
        procs += [context.Process(target=spin, args=(start + seconds,)) for _ in range(busy)]
        for p in procs:
            p.start()
        per_writer = [out.get() for _ in range(writers)]
        for p in procs:
            p.join()
    return [sorted(round_)[quorum - 1] for round_ in zip(*per_writer, strict=True)]


def summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    cells = [f"{name} {percentile(ordered, q) * 1e3:.2f}" for name, q in PERCENTILES]
    return ", ".join(cells) + f", max {ordered[-1] * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=os.getcwd(), help="a directory on the disk the servers use")
    parser.add_argument("--bytes", type=int, default=280_000, help="bytes a sync writes (one request's)")
    parser.add_argument("--rate", type=float, default=200.0, help="syncs a second per journal")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU meanwhile")
    args = parser.parse_args()
    latencies = quorum_latencies(args.dir, args.bytes, args.rate, args.seconds, args.busy)
    print(f"2 of 3 journals, {args.bytes:,} B at {args.rate:g}/s each, {args.busy} cores kept busy: "
          f"{summary(latencies)} ({len(latencies)} rounds)")


if __name__ == "__main__":
    main()
