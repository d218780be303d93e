"""Builds real segment stores (file durable logs, filesystem or S3 chunk storage) for tests."""

from __future__ import annotations

import os
from dataclasses import replace

from millrace.store.containers.config import ContainerConfig
from millrace.store.durablelog.local import FileDurableDataLog
from millrace.store.lts.filesystem import FileSystemChunkStorage
from millrace.store.lts.interface import ChunkStorage
from millrace.store.segment_store import SegmentStore

# Small thresholds so flushing, eviction, checkpoints and log truncation all happen in tests.
TEST_CONFIG = ContainerConfig(
    cache_max_bytes=4 * 1024 * 1024,
    flush_threshold_bytes=256 * 1024,
    flush_age_seconds=0.2,
    writer_poll_seconds=0.05,
    max_chunk_bytes=1024 * 1024,
    checkpoint_every_bytes=512 * 1024,
)


def open_store(
    root: str,
    containers: int = 4,
    storage: ChunkStorage | None = None,
    **overrides: int | float,
) -> SegmentStore:
    config = replace(TEST_CONFIG, **overrides)
    log_root = os.path.join(root, "logs")
    store = SegmentStore(
        containers,
        # Small log files so truncation (which drops whole files) visibly bounds the log.
        lambda cid: FileDurableDataLog(os.path.join(log_root, f"container-{cid}"), max_file_bytes=256 * 1024),
        storage or FileSystemChunkStorage(os.path.join(root, "lts")),
        config,
    )
    store.start()
    return store
