"""The other Kafka nodes as this node's coordinators see them: a node as clients reach it
(``KafkaNode``) and who leads what (``NodeDirectory``, which ``cluster.KafkaCluster`` is on a cluster
node; there is none in one process)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class KafkaNode:
    """A live node as Kafka clients see it: its numeric id and advertised Kafka listeners (``host:port``
    its first; ``listeners``, each by name, when it registered them)."""

    node_id: int
    host: str
    port: int
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict, compare=False)

    def on(self, listener: str | None) -> tuple[str, int]:
        """Where the node is reached on ``listener`` (Kafka advertises to each client the listener it came
        in on); its first listener for None, or for a name it did not register."""
        return self.listeners.get(listener, (self.host, self.port)) if listener else (self.host, self.port)


class NodeDirectory(Protocol):
    """Which live node leads a partition's open segment and coordinates the groups and the transactions."""

    def leader(self, segment: str) -> KafkaNode | None: ...

    def group_coordinator(self) -> KafkaNode | None: ...

    def transaction_coordinator(self) -> KafkaNode | None: ...
