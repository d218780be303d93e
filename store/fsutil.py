"""Filesystem durability helpers shared by the local durable log and filesystem chunk storage."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make a directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
