"""Reading a fragment's entries from the replicas that hold them, and copying them onto others.

**Reading** asks a fragment's replicas in turn for ranges of entries, accepting an entry only with
the fragment's epoch and a matching CRC-32C; any replica holding it will do. A replica holding the
entry with that epoch but a bad payload (its logd answers ``corrupt``, or the CRC check here fails)
holds a *bad copy*: the entry is taken from another replica and the reader's ``BadCopyHandler`` is
given the good one (the replicated log's maintenance thread rewrites it).

**Copying** reads a range that way and appends it onto target replicas under the owner's epoch, in
batches: recovery copies the old owner's tail onto the fenced responders, repair copies closed
fragments onto a spare or a returned replica.

No state and no thread of its own: every call runs on its caller's thread with the caller's
``ReplicaRpc`` (a ZeroMQ socket belongs to one thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from crc32c import crc32c

from millrace.store.durablelog.metadata import Fragment, OwnedRecord
from millrace.store.durablelog.replica_rpc import ReplicaRpc
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.errors import ContainerOfflineError, DataCorruptionError, DataLogWriterFencedError
from millrace.store.logd import wire

READ_CHUNK_BYTES = 8 * 1024 * 1024

#: Told of a replica's bad copy once a good one was found: (fragment, replica, sequence, payload, crc).
BadCopyHandler = Callable[[Fragment, str, int, bytes, int], None]


def read_range(rpc: ReplicaRpc, log_name: str, fragment: Fragment, members: Iterable[str], start: int,
               end: int, timeout: float, on_bad_copy: BadCopyHandler | None = None) -> Iterator[tuple[int, bytes, int]]:
    """(sequence, payload, crc) for start..end of ``fragment`` from whichever of ``members`` holds
    each entry with the fragment's epoch and a valid CRC; DataCorruptionError if none does.

    A member holding an entry with the fragment's epoch but a payload that fails its CRC-32C (checked
    here, end to end, or by the logd itself, which answers ``corrupt``) holds a *bad copy*: the entry
    is taken from another member and ``on_bad_copy`` is given the good one to repair it with."""
    order = list(members)
    sequence = start
    bad: list[str] = []  # members that answered a bad copy of ``sequence``
    while sequence <= end:
        for address in list(order):
            if address in bad:
                continue
            got = corrupt = False
            reply = rpc.call_one(address, {"op": "read", "log": log_name, "from": sequence, "to": end,
                                           "max_bytes": READ_CHUNK_BYTES}, [], timeout)
            if reply is not None and reply[0].get("status") == wire.OK:
                for (seq, entry_epoch, crc), payload in zip(reply[0]["entries"], reply[1], strict=True):
                    if seq != sequence or entry_epoch != fragment.epoch:
                        break
                    if crc32c(payload) != crc:
                        corrupt = True
                        break
                    if bad and on_bad_copy is not None:
                        for holder in bad:
                            on_bad_copy(fragment, holder, seq, payload, crc)
                    bad = []
                    yield seq, payload, crc
                    sequence += 1
                    got = True
                else:
                    corrupt = reply[0].get("corrupt") == [sequence, fragment.epoch]
            if corrupt:
                bad.append(address)
            if got:
                break
            order.remove(address)  # it lacks this entry (or is down): ask it last next time
            order.append(address)
        else:
            damaged = f" (bad copies on {', '.join(bad)})" if bad else ""
            raise DataCorruptionError(f"log {log_name}: entry {sequence} (epoch {fragment.epoch}) is on none of "
                                      f"{', '.join(order)}{damaged}")


class FragmentCopier:
    """Copies ranges of a log's entries between its replicas as the owner of ``owned`` (its epoch
    fences the writes; its record's truncation point rides on them), reporting bad copies it meets
    to ``on_bad_copy``."""

    def __init__(self, owned: OwnedRecord, config: ReplicationConfig, on_bad_copy: BadCopyHandler) -> None:
        self._owned = owned
        self._config = config
        self._on_bad_copy = on_bad_copy

    def copy(self, rpc: ReplicaRpc, fragment: Fragment, sources: list[str], start: int, end: int,
             written_as: Fragment, targets: dict[str, int]) -> None:
        """Copy entries start..end of ``fragment`` from ``sources`` (CRC-checked, bad copies reported)
        onto ``targets`` (address -> the last entry it holds) as entries of ``written_as``, in batches of
        up to ``max_batch_bytes``."""
        batch: list[tuple[int, bytes, int]] = []
        size = 0  # of the batch's payloads (kept, not summed again per entry: batches hold thousands)
        for item in read_range(rpc, self._owned.log_name, fragment, sources, start, end,
                               self._config.request_timeout, self._on_bad_copy):
            batch.append(item)
            size += len(item[1])
            if item[0] == end or size >= self._config.max_batch_bytes:
                self._write(rpc, written_as, targets, batch)
                batch, size = [], 0

    def _write(self, rpc: ReplicaRpc, fragment: Fragment, targets: dict[str, int],
               batch: list[tuple[int, bytes, int]]) -> None:
        log_name = self._owned.log_name
        requests = {}
        truncated = self._owned.record.truncated
        for address, holds in targets.items():
            wanted = [(s, p, c) for s, p, c in batch if s > holds]
            if wanted:
                requests[address] = ({"op": "append", "log": log_name, "epoch": self._owned.epoch,
                                      "entry_epoch": fragment.epoch, "first": fragment.first, "lac": 0,
                                      "truncated": truncated, "entries": [[s, c] for s, _, c in wanted]},
                                     [p for _, p, _ in wanted])
        replies = rpc.call(requests, self._config.request_timeout)
        for address in requests:
            header = replies.get(address, ({"status": "timeout"}, []))[0]
            if header.get("status") == wire.FENCED:
                raise DataLogWriterFencedError(f"log {log_name}: fenced while copying to {address}")
            if header.get("status") != wire.OK:
                raise ContainerOfflineError(f"log {log_name}: copying entries to {address} failed: {header}")
            targets[address] = batch[-1][0]
