"""What the whole machine did over a stretch of time: bytes written to the disk under a directory
(``/proc/diskstats``) and CPU time busy on all cores (``/proc/stat``), whoever did it.

A benchmark's own processes are not the whole cost of a run: three log replicas write every byte three
times to one disk, and the load generator shares the cores. Set against the disk's and the cores'
limits measured in the same run, these say which of the two bounds a row.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


def block_device(directory: str) -> str | None:
    """The name in ``/proc/diskstats`` of the whole disk holding ``directory`` (``vda`` for ``vda1``);
    None on a file system with no disk of its own (tmpfs, overlay)."""
    st = os.stat(directory)
    link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not os.path.exists(link):
        return None
    if os.path.exists(os.path.join(link, "partition")):
        link = os.path.dirname(link)
    return os.path.basename(link)


def sectors_written(device: str) -> int:
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if fields[2] == device:
                return int(fields[9])
    raise RuntimeError(f"no device {device} in /proc/diskstats")


def busy_cpu_seconds() -> float:
    """CPU time all cores spent on anything but idling or waiting for I/O, since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle, iowait = values[3], values[4]
    busy = sum(values[:8]) - idle - iowait  # user nice system idle iowait irq softirq steal; guests are in user
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    seconds: float
    disk_mb_s: float  # 10^6 bytes written to the disk per second (NaN with no disk to read)
    busy_cores: float  # cores busy on average (at most os.cpu_count())


class MachineLoad:
    """Start at construction; ``done()`` gives what the machine did since."""

    def __init__(self, directory: str) -> None:
        self._device = block_device(directory)
        self._start = (time.monotonic(), self._sectors(), busy_cpu_seconds())

    def _sectors(self) -> int:
        return sectors_written(self._device) if self._device is not None else 0

    def done(self) -> Load:
        t0, sectors0, busy0 = self._start
        seconds = time.monotonic() - t0
        written = (self._sectors() - sectors0) * SECTOR_BYTES
        disk = written / seconds / 1e6 if self._device is not None else math.nan
        return Load(seconds, disk, (busy_cpu_seconds() - busy0) / seconds)
