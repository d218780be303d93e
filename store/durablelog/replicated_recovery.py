"""Opening a replicated log as its new owner: fencing and recovery (BookKeeper's LedgerRecoveryOp).

With the epoch taken in the metadata (``OwnedRecord.take_epoch``, a compare-and-set), fence the last
fragment's ensemble with it and wait for at least ``max(E - AQ + 1, min(AQ, E))`` of them: then at
most AQ - 1 unfenced replicas remain, so an older owner can never again gather an ack quorum, and
every entry the old owner had acknowledged (on AQ replicas) is held by at least one responder. The
recovered end is the highest sequence any responder holds in the old fragment's epoch (each holds a
prefix; see ``recovery_end``); the tail is copied onto every responder that lacks part of it, and
only then is the new owner's fragment (starting right after the recovered end) recorded. From that
moment an entry of the old epoch beyond the recovered end is outside every fragment of its epoch and
never read, whatever a replica still holds.

Thread: ``recover`` runs once per open, on ``open``'s thread, before the log's I/O and maintenance
threads start, with ``open``'s ``ReplicaRpc``. It keeps no state beyond the call: it changes the
metadata only through the ``OwnedRecord`` and hands the writer a ``Recovered``. Bad copies met while
copying the tail go to the copier's handler (the maintenance thread rewrites them once it starts).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from millrace.store.durablelog.fragment_copy import FragmentCopier
from millrace.store.durablelog.metadata import Fragment, OwnedRecord
from millrace.store.durablelog.replica_rpc import ReplicaRpc
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.errors import ContainerOfflineError, DataLogWriterFencedError
from millrace.store.logd import wire


def fence_quorum(ensemble_size: int, ack_quorum: int) -> int:
    """Fenced responders a new owner needs: enough that fewer than AQ replicas stay unfenced, and at
    least AQ (when the ensemble has them) so the recovered tail lands on an ack quorum."""
    return max(ensemble_size - ack_quorum + 1, min(ack_quorum, ensemble_size))


def recovery_end(first: int, truncated: int, held: Iterable[int]) -> int:
    """The recovery rule: the last sequence of a fragment starting at ``first`` that could have been
    acknowledged is the highest prefix end any fenced responder reports (an acknowledged entry sits on
    AQ replicas, and a fence quorum meets every AQ-sized set)."""
    return max([first - 1, truncated, *held])


@dataclass(frozen=True)
class Recovered:
    """What the new owner starts writing from."""

    next_sequence: int  # right after the recovered end: the new owner's fragment starts here
    ensemble: list[str]  # the new fragment's replicas (fenced responders first, then reachable ones)
    lagging: list[str]  # replicas of recorded fragments that did not answer (or answer the fence)
    reachable: set[str]  # replicas that answered: reads ask them first


def recover(rpc: ReplicaRpc, owned: OwnedRecord, config: ReplicationConfig, copier: FragmentCopier) -> Recovered:
    """Fence, find the recovered end, copy the tail onto the responders, record the new fragment."""
    log_name, epoch = owned.log_name, owned.epoch
    record = owned.record
    deadline = time.monotonic() + config.open_timeout
    last = record.fragments[-1] if record.fragments else None
    members = list(last.ensemble) if last else []
    fenced: dict[str, int] = {}
    alive: set[str] = set()
    while True:
        requests: dict[str, tuple[dict[str, Any], list[bytes]]] = {}
        for address in dict.fromkeys([*members, *config.replicas]):
            if address in fenced or address in alive:
                continue
            if address in members and last is not None:
                requests[address] = ({"op": "fence", "log": log_name, "epoch": epoch,
                                      "first": last.first, "entry_epoch": last.epoch,
                                      "truncated": record.truncated}, [])
            else:
                requests[address] = ({"op": "last_confirmed", "log": log_name}, [])
        # Once enough have answered, a replica that is down costs a short grace, not the timeout.
        enough = fence_quorum(len(members), config.ack_quorum) if members else config.ack_quorum
        replies = rpc.call(requests, config.request_timeout, enough=enough, grace=0.5)
        for address, (header, _) in replies.items():
            if header.get("status") == wire.FENCED:
                raise DataLogWriterFencedError(f"log {log_name}: replica {address} is fenced at epoch "
                                               f"{header.get('fenced')}, newer than {epoch}")
            if header.get("status") != wire.OK:
                continue
            alive.add(address)
            if address in members:
                fenced[address] = int(header["last"])
        quorum_fenced = len(fenced) >= fence_quorum(len(members), config.ack_quorum)
        if quorum_fenced and len(alive) >= config.ack_quorum:
            break
        if time.monotonic() >= deadline:
            raise ContainerOfflineError(
                f"log {log_name}: {len(fenced)} of {len(members)} replicas answered the fence, "
                f"{len(alive)} of {len(config.replicas)} are reachable")
    truncated = record.truncated
    if last is None:
        end = truncated
    else:
        end = recovery_end(last.first, truncated, fenced.values())
        _copy_tail(rpc, owned, copier, last, fenced, end)
    ensemble = [a for a in members if a in fenced]
    ensemble += [a for a in config.replicas if a in alive and a not in ensemble]
    ensemble = ensemble[: config.write_quorum]
    if len(ensemble) < config.ack_quorum:
        raise ContainerOfflineError(f"log {log_name}: {len(ensemble)} replicas answered, the ack "
                                    f"quorum is {config.ack_quorum}")
    owned.change(lambda r: r.with_fragment(Fragment(epoch, end + 1, tuple(ensemble))))
    lagging = [a for f in record.fragments for a in f.ensemble if a not in alive or (a in members and a not in fenced)]
    return Recovered(end + 1, ensemble, list(dict.fromkeys(lagging)), alive)


def _copy_tail(rpc: ReplicaRpc, owned: OwnedRecord, copier: FragmentCopier, last: Fragment, held: dict[str, int],
               end: int) -> None:
    """Bring every fenced responder up to ``end`` (the old epoch's entries, under our epoch)."""
    behind = {a: h for a, h in held.items() if h < end}
    if not behind:
        return
    start = max(min(behind.values()), owned.record.truncated) + 1
    copier.copy(rpc, last, sorted(held, key=lambda a: -held[a]), start, end, last, behind)
