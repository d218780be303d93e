"""KernelSyncs: fdatasync through Linux AIO, ends signalled on an eventfd."""

from __future__ import annotations

import errno
import os
import select
from pathlib import Path

import pytest

from millrace.store.durablelog.kernel_sync import KernelSyncs


def test_a_sync_ends_with_its_callback_once_the_eventfd_is_readable(tmp_path: Path, syncs: KernelSyncs) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"data")
        ended: list[OSError | None] = []
        syncs.submit(fd, ended.append)
        assert select.select([syncs.fileno()], [], [], 10)[0]
        assert syncs.reap() == 1
        assert ended == [None]
        assert syncs.reap() == 0  # nothing left in flight
    finally:
        os.close(fd)


def test_many_syncs_at_once_all_end(tmp_path: Path, syncs: KernelSyncs) -> None:
    """More than one io_getevents' worth (64) in flight: every callback runs."""
    fds = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(100)]
    try:
        ended: list[OSError | None] = []
        for fd in fds:
            os.write(fd, b"x")
            syncs.submit(fd, ended.append)
        while len(ended) < len(fds):
            syncs.reap(wait=True)
        assert ended == [None] * len(fds)
    finally:
        for fd in fds:
            os.close(fd)


def test_a_sync_the_kernel_cannot_start_raises_at_once(syncs: KernelSyncs) -> None:
    with pytest.raises(OSError) as raised:
        syncs.submit(987_654, lambda error: None)  # not a descriptor
    assert raised.value.errno == errno.EBADF
    assert syncs.reap() == 0


def test_close_waits_out_the_syncs_in_flight(tmp_path: Path) -> None:
    syncs = KernelSyncs.open()
    if syncs is None:
        pytest.skip("this kernel gives no AIO context")
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        ended: list[OSError | None] = []
        os.write(fd, b"x")
        syncs.submit(fd, ended.append)
        syncs.close()
        assert ended == [None]
    finally:
        os.close(fd)
