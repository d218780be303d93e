"""Tunables of a segment container, with defaults fit for the embedded single-node server."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class ContainerConfig:
    # Read cache: memory bound per container. Only data long-term storage already holds is evicted,
    # so un-flushed data may push the cache past this bound until the storage writer catches up.
    cache_max_bytes: int = 256 * MiB
    # Storage writer: a segment's pending data is flushed once it reaches this size ...
    flush_threshold_bytes: int = 8 * MiB
    # ... or once its oldest pending byte is this old (Pravega's 30 s: shorter costs a chunk and two
    # fsyncs per trickling segment each time; longer keeps more of the durable log until truncation).
    flush_age_seconds: float = 30.0
    # How often the storage writer looks for work when nothing wakes it.
    writer_poll_seconds: float = 0.2
    # A chunk never exceeds this size; larger flushes are split.
    max_chunk_bytes: int = 64 * MiB
    # A metadata checkpoint is written after this many bytes of operations; the log is truncated
    # up to the newest checkpoint whose data long-term storage fully holds.
    checkpoint_every_bytes: int = 64 * MiB
    # Largest single append accepted.
    max_append_bytes: int = 16 * MiB
    # Threads for long-term storage reads (they block on disk or network).
    storage_read_threads: int = 4
