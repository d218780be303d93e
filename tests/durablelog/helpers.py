"""Shared helpers for the durable log tests."""

from __future__ import annotations

import os
from pathlib import Path

from millrace.store.durablelog.local import FileDurableDataLog


def open_log(path: Path | str, **kwargs: int) -> FileDurableDataLog:
    log = FileDurableDataLog(str(path), **kwargs)
    log.open()
    return log


def read_payloads(path: Path | str, **kwargs: int) -> list[tuple[int, bytes]]:
    """Reopen the log at ``path`` and return [(sequence, payload)], closing it again."""
    log = open_log(path, **kwargs)
    try:
        return [(e.address.sequence, e.payload) for e in log.read_all()]
    finally:
        log.close()


def log_files(path: Path | str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def payload_for(worker: int, index: int) -> bytes:
    """A deterministic payload of varying size, recomputable from (worker, index)."""
    return f"{worker}:{index}:".encode() * (index % 37 + 1)
