"""Recovery of a container's state (Pravega's recovery processor), and the checkpoint a clean shutdown
publishes to long-term storage.

The durable log always begins with a checkpoint: recovery restores it, then replays every later
operation through the same ``accept`` and ``apply`` as the live path, on the starting thread, before
anything else can reach the container. With an empty log, the state comes from the checkpoint the
last clean shutdown published next to the data, so a node that lost its local disk still finds every
segment; after a crash the local log is authoritative.
"""

from __future__ import annotations

import json
import logging
import time

from millrace.store.containers.memory_state import MemoryState
from millrace.store.containers.operations import Checkpoint, decode_frame
from millrace.store.durablelog.interface import DurableDataLog
from millrace.store.errors import DataCorruptionError
from millrace.store.lts.interface import ChunkStorage

log = logging.getLogger(__name__)


def replay_log(container_id: int, durable_log: DurableDataLog, state: MemoryState) -> bool:
    """Restore the log's first checkpoint and replay the rest. Returns True for an empty log."""
    empty = True
    for entry in durable_log.read_all():
        for position, op in enumerate(decode_frame(entry.payload)):
            if empty:
                if not isinstance(op, Checkpoint):
                    raise DataCorruptionError(
                        f"container {container_id}: log does not begin with a checkpoint "
                        f"(entry {entry.address.sequence})"
                    )
                state.metadata.restore(op.snapshot)
                empty = False
            else:
                op.accept(state.metadata)
            op.apply(state, entry.address if position == 0 else None)
    return empty


def published_prefix(container_id: int) -> str:
    # Outside "containers/{id}/", so the orphan sweep over segment chunks never touches it.
    return f"containers/{container_id}.meta/"


def restore_published(container_id: int, storage: ChunkStorage, state: MemoryState) -> None:
    """Restore the newest checkpoint a clean shutdown published, if there is one."""
    prefix = published_prefix(container_id)
    names = sorted(storage.list(prefix))
    if not names:
        return
    raw = storage.read(names[-1], 0, 1 << 31)
    try:
        snapshot = json.loads(raw)
    except ValueError as exc:
        raise DataCorruptionError(f"container {container_id}: checkpoint {names[-1]} unreadable") from exc
    log.info("container %s: empty log, restoring from %s", container_id, names[-1])
    state.metadata.restore(snapshot)


def publish(container_id: int, epoch: int, storage: ChunkStorage, snapshot: dict[str, object]) -> None:
    """Leave ``snapshot`` in long-term storage next to the data it describes, replacing older ones."""
    prefix = published_prefix(container_id)
    name = f"{prefix}checkpoint-{epoch:012d}-{time.time_ns():020d}"
    storage.write(name, json.dumps(snapshot, separators=(",", ":")).encode())
    for old in storage.list(prefix):
        if old != name:
            storage.delete(old)
