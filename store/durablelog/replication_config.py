"""How a replicated log is spread over its replicas: the pool, the quorums, the timeouts and bounds.

Shared, read-only, by the parts of the replicated log (``replicated``, ``replicated_recovery``,
``replicated_repair``, ``fragment_copy``), so none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from millrace.store.durablelog.curve import CurveClientKeys


@dataclass(frozen=True)
class ReplicationConfig:
    replicas: tuple[str, ...]  # the pool, "host:port"; those beyond the write quorum are spares
    write_quorum: int = 3
    ack_quorum: int = 2
    request_timeout: float = 5.0
    open_timeout: float = 30.0
    max_batch_bytes: int = 4 * 1024 * 1024
    max_retained_bytes: int = 64 * 1024 * 1024
    probe_interval: float = 1.0  # how often a shrunk log looks for a replica to grow back with
    curve: CurveClientKeys | None = None  # CURVE keys the replica links use (None: plain TCP)

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= len(self.replicas):
            raise ValueError(f"need 1 <= ack quorum ({self.ack_quorum}) <= write quorum ({self.write_quorum}) "
                             f"<= replicas ({len(self.replicas)})")
