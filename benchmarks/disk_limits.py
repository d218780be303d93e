"""Raw limits of the disk under a directory: sequential write bandwidth and small-write fsync rate.

Run directly (``python benchmarks/disk_limits.py``) or import the functions; the durable log benchmark
prints these next to its own figures so ratios are taken against the same disk in the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class DiskLimits:
    sequential_write_mb_s: float
    fsyncs_per_s: float


def sequential_write_mb_s(
    directory: str, total_bytes: int = 512 * MIB, block_bytes: int = MIB, time_limit_s: float = 8.0
) -> float:
    """MB/s (10^6 bytes) of large os.write calls followed by one fsync, all counted in the time.

    Stops early at ``time_limit_s`` so a slow disk does not stall the run; the fsync is always paid.
    """
    block = os.urandom(block_bytes)
    fd, path = tempfile.mkstemp(prefix="seqwrite-", dir=directory)
    try:
        written = 0
        start = time.perf_counter()
        while written < total_bytes and time.perf_counter() - start < time_limit_s:
            written += os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6


def fsync_rate(directory: str, duration_s: float = 2.0, write_bytes: int = 100, preallocated: bool = False) -> float:
    """fdatasyncs per second, each after a small appending write (what a log at low load pays).

    ``preallocated``: into space allocated first (``posix_fallocate``) and written at offsets, as the
    durable logs write (``fsutil.Preallocation``), so no sync has to commit a new file size."""
    block = os.urandom(write_bytes)
    fd, path = tempfile.mkstemp(prefix="fsync-", dir=directory)
    try:
        if preallocated:
            os.posix_fallocate(fd, 0, 64 * MIB)
            os.fsync(fd)
        count = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < duration_s:
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


def measure(directory: str) -> DiskLimits:
    return DiskLimits(sequential_write_mb_s(directory), fsync_rate(directory))


def measure_sequential_write(directory: str) -> dict[str, float]:
    """``sequential_write_mb_s`` as a dict (``{"mb_per_s": ...}``), for JSON-reporting benchmarks."""
    return {"mb_per_s": sequential_write_mb_s(directory)}


def measure_fsync_rate(directory: str) -> dict[str, float]:
    """``fsync_rate`` as a dict (``{"fsyncs_per_s": ...}``), for JSON-reporting benchmarks."""
    return {"fsyncs_per_s": fsync_rate(directory)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the disk to measure")
    args = parser.parse_args()
    limits = measure(args.dir)
    print(f"sequential write: {limits.sequential_write_mb_s:8.1f} MB/s")
    print(f"fsync rate:       {limits.fsyncs_per_s:8.0f} fdatasync/s (100-byte appending writes)")
    print(f"                  {fsync_rate(args.dir, preallocated=True):8.0f} fdatasync/s (the same into allocated space)")


if __name__ == "__main__":
    main()
