"""What every scenario shares: servers started and stopped, processes' CPU and memory sampled,
percentiles and medians, and the machine's own floors measured in the same run.

A figure of Millrace means little on a shared two-core machine unless the machine's limits are read
beside it, in the same run: the disk's sequential writes and fsyncs, a loopback TCP stream, and what
the whole machine (every process, the load generator's too) did meanwhile.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.durablelog.logd_process import Replicas
from tests.server_process import ServerProcess

__all__ = ["MIB", "MachineLoad", "Replicas", "RssSampler", "Scenario", "ServerProcess", "cpu_seconds", "create_topics",
           "fresh_server", "latency_summary", "loopback_tcp_mb_s", "machine_floors", "median_of", "percentile",
           "produce_all", "rss_mb", "sequential_write_mb_s", "fsync_rate"]

MIB = 1024 * 1024
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


# -- servers -------------------------------------------------------------------------------------------

@contextmanager
def fresh_server(*server_args: str, prefix: str = "millrace-bench-", env: dict[str, str] | None = None,
                 timeout: float = 60.0) -> Iterator[ServerProcess]:
    """A ``millrace serve`` on a new data directory, SIGKILLed and its data removed afterwards (a
    benchmark's data is never worth a clean shutdown's wait)."""
    data_dir = tempfile.mkdtemp(prefix=prefix)
    server = ServerProcess(data_dir, *server_args, env=env).start(timeout=timeout)
    try:
        yield server
    finally:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def server_pid(server: ServerProcess) -> int:
    assert server.proc is not None, "the server was not started"
    return server.proc.pid


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of one process (all its threads) so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss_mb(pid: int) -> int:
    return round(psutil.Process(pid).memory_info().rss / 1e6)


def create_topics(bootstrap: str, names: Iterable[str], partitions: int, config: Mapping[str, str] | None = None,
                  **client_config: Any) -> None:
    """Create the topics and wait for every one (``client_config``: TLS or SASL settings)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **client_config})
    futures = admin.create_topics([NewTopic(n, partitions, 1, config=dict(config or {})) for n in names],
                                  operation_timeout=60)
    for future in futures.values():
        future.result(120)


def produce_all(producer: Producer, topic: str, count: int, payload: bytes, partitions: int = 0,
                **produce_args: Any) -> None:
    """``count`` records as fast as librdkafka takes them (round-robin over ``partitions`` when given),
    waiting for room when its queue is full; the caller flushes."""
    for i in range(count):
        if partitions:
            produce_args["partition"] = i % partitions
        while True:
            try:
                producer.produce(topic, payload, **produce_args)
                break
            except BufferError:
                producer.poll(0.01)
        if not i & 1023:
            producer.poll(0)


class RssSampler(threading.Thread):
    """A process's RSS every ``every`` seconds: its peak, and (seconds since start, bytes) samples.
    ``finish()`` stops it and returns the samples."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.every = every
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.began = time.monotonic()
        self.start()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                rss = self.process.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self.samples.append((time.monotonic() - self.began, rss))
            self.stopped.wait(self.every)

    def finish(self) -> list[tuple[float, int]]:
        self.stopped.set()
        self.join()
        return self.samples

    def at_fractions(self, parts: int) -> list[int]:
        """RSS in bytes at each 1/``parts`` of the samples, first and last included."""
        s = self.samples
        return [s[min(len(s) - 1, len(s) * q // parts)][1] for q in range(parts + 1)]


# -- statistics ----------------------------------------------------------------------------------------

def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of the (already sorted) values lie; NaN for none."""
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def latency_summary(seconds: Iterable[float]) -> dict[str, float]:
    """p50, p99 and max of latencies given in seconds, in milliseconds."""
    ordered = sorted(seconds)
    return {"p50_ms": round(percentile(ordered, 0.5) * 1e3, 2), "p99_ms": round(percentile(ordered, 0.99) * 1e3, 2),
            "max_ms": round(ordered[-1] * 1e3, 2) if ordered else math.nan}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over runs of one case (nested dicts too); other values from the first."""
    first = runs[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
            out[key] = value
        elif isinstance(value, dict):
            out[key] = median_of([r[key] for r in runs])
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


# -- the machine's floors ------------------------------------------------------------------------------

def sequential_write_mb_s(directory: str, total_bytes: int = 512 * MIB, seconds: float = 8.0) -> float:
    """MB/s (10^6 bytes) of 1 MiB writes followed by one fsync, the fsync counted; stops early at
    ``seconds`` so a slow disk does not stall the run."""
    block = os.urandom(MIB)
    fd, path = tempfile.mkstemp(prefix="seqwrite-", dir=directory)
    try:
        written = 0
        start = time.perf_counter()
        while written < total_bytes and time.perf_counter() - start < seconds:
            written += os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6


def fsync_rate(directory: str, seconds: float = 2.0, write_bytes: int = 100, preallocated: bool = False) -> float:
    """fdatasyncs per second, each after a small appending write (what a log at low load pays).

    ``preallocated``: into space allocated first and written at offsets, as the durable logs write, so
    no sync also commits a new file size (a cheaper sync on ext4)."""
    block = os.urandom(write_bytes)
    fd, path = tempfile.mkstemp(prefix="fsync-", dir=directory)
    try:
        if preallocated:
            os.posix_fallocate(fd, 0, 64 * MIB)
            os.fsync(fd)
        count = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            if preallocated:
                os.pwrite(fd, block, count * write_bytes)
            else:
                os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return count / elapsed


def loopback_tcp_mb_s(total_bytes: int = 256 * MIB) -> float:
    """MB/s of one TCP stream over 127.0.0.1 (1 MiB sends into a reused buffer), the best of three: the
    machine is shared, and the best is the closest to its limit."""
    return max(_loopback_once(total_bytes) for _ in range(3))


def _loopback_once(total_bytes: int) -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    block = os.urandom(MIB)
    total = max(1, total_bytes // MIB) * MIB

    def send() -> None:
        conn, _ = listener.accept()
        with conn:
            for _ in range(total // MIB):
                conn.sendall(block)

    sender = threading.Thread(target=send)
    sender.start()
    buffer = bytearray(MIB)
    with socket.create_connection(listener.getsockname()) as receiver:
        start = time.perf_counter()
        got = 0
        while got < total:
            got += receiver.recv_into(buffer)
        elapsed = time.perf_counter() - start
    sender.join()
    listener.close()
    return got / elapsed / 1e6


def machine_floors(directory: str, loopback: bool = True) -> dict[str, float]:
    """The disk's (under ``directory``) and loopback's limits, printed and returned."""
    floors = {"cores": float(os.cpu_count() or 0), "disk_write_mb_s": round(sequential_write_mb_s(directory), 1),
              "fsyncs_per_s": round(fsync_rate(directory))}
    if loopback:
        floors["loopback_tcp_mb_s"] = round(loopback_tcp_mb_s())
    print("machine: " + ", ".join(f"{k} {v:,.0f}" for k, v in floors.items()), flush=True)
    return floors


def _block_device(directory: str) -> str | None:
    """The name in ``/proc/diskstats`` of the whole disk holding ``directory``; None on a file system with
    no disk of its own (tmpfs, overlay)."""
    st = os.stat(directory)
    link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not os.path.exists(link):
        return None
    if os.path.exists(os.path.join(link, "partition")):
        link = os.path.dirname(link)
    return os.path.basename(link)


def _sectors_written(device: str | None) -> int:
    if device is None:
        return 0
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if fields[2] == device:
                return int(fields[9])
    raise RuntimeError(f"no device {device} in /proc/diskstats")


def _busy_cpu_seconds() -> float:
    """CPU time all cores spent on anything but idling or waiting for I/O, since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    busy = sum(values[:8]) - values[3] - values[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    seconds: float
    disk_mb_s: float  # 10^6 bytes written to the disk per second (NaN with no disk to read)
    busy_cores: float  # cores busy on average, whoever used them


class MachineLoad:
    """What the whole machine did from construction to ``done()``: a benchmark's own processes are not
    the whole cost of a run (three log replicas write every byte three times to one disk, and the load
    generator shares the cores), so this says which bound a row met."""

    def __init__(self, directory: str) -> None:
        self._device = _block_device(directory)
        self._start = (time.monotonic(), _sectors_written(self._device), _busy_cpu_seconds())

    def done(self) -> Load:
        t0, sectors0, busy0 = self._start
        seconds = time.monotonic() - t0
        written = (_sectors_written(self._device) - sectors0) * SECTOR_BYTES
        disk = written / seconds / 1e6 if self._device is not None else math.nan
        return Load(seconds, disk, (_busy_cpu_seconds() - busy0) / seconds)


# -- scenarios -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """One named measurement of ``python -m benchmarks``: its one-line summary for ``--help``, its
    arguments, and the run that prints its table and returns its figures (``--json`` writes them)."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], dict[str, Any]]
    description: str = ""
