"""The znodes of one Millrace cluster under its root (default ``/millrace``) and their JSON contents.

    <root>/cluster                 {"containers": C}: fixed when the first node starts the cluster
    <root>/nodes/<node id>         ephemeral: NodeInfo of a live node (its session holds it)
    <root>/leader/candidate-NNNN   ephemeral sequential: the lowest is the elected assigner
    <root>/containers/<id>         ContainerOwner: the node, its incarnation and the ownership epoch
    <root>/handovers/<id>          Handover: the assigner asks the live owner of epoch e to release the
                                   container; the owner stops it and marks the request released
    <root>/logs/<log name>         a replicated log's LogRecord (the znode version is its version)

Every write of ``containers/`` (and the assigner's writes of ``handovers/``) is one transaction that also checks the writer's candidate znode, so
only an elected assigner whose session still lives can change ownership. Node ids are single znode
names: letters, digits, ``_ . -``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from millrace.store.cluster.assignment import Assignment

DEFAULT_ROOT = "/millrace"
_NODE_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def check_node_id(node_id: str) -> str:
    if not _NODE_ID.fullmatch(node_id) or node_id in (".", ".."):
        raise ValueError(f"bad node id {node_id!r}: letters, digits, '_', '.', '-' only")
    return node_id


@dataclass(frozen=True)
class ClusterPaths:
    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        if not self.root.startswith("/") or self.root.endswith("/"):
            raise ValueError(f"bad cluster root {self.root!r}: absolute, no trailing '/'")

    @property
    def config(self) -> str:
        return f"{self.root}/cluster"

    @property
    def nodes(self) -> str:
        return f"{self.root}/nodes"

    def node(self, node_id: str) -> str:
        return f"{self.nodes}/{check_node_id(node_id)}"

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def candidate_prefix(self) -> str:
        return f"{self.leader}/candidate-"

    @property
    def containers(self) -> str:
        return f"{self.root}/containers"

    def container(self, container_id: int) -> str:
        return f"{self.containers}/{container_id}"

    @property
    def handovers(self) -> str:
        return f"{self.root}/handovers"

    def handover(self, container_id: int) -> str:
        return f"{self.handovers}/{container_id}"

    @property
    def logs(self) -> str:
        return f"{self.root}/logs"


@dataclass(frozen=True)
class NodeInfo:
    """What a live node tells the cluster: where it binds (``host``, ``ports`` by listener name:
    kafka, native, http) and the addresses clients should dial (``advertised``, listener name ->
    "host:port"; the bind address 0.0.0.0 is no address to give a client)."""

    node_id: str
    host: str
    ports: dict[str, int] = field(default_factory=dict)
    advertised: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({"node_id": self.node_id, "host": self.host, "ports": self.ports,
                           "advertised": self.advertised}, sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> NodeInfo:
        raw = json.loads(data)
        return NodeInfo(str(raw["node_id"]), str(raw["host"]),
                        {str(k): int(v) for k, v in raw.get("ports", {}).items()},
                        {str(k): str(v) for k, v in raw.get("advertised", {}).items()})


def native_endpoint(info: NodeInfo) -> str | None:
    """Where clients (and other nodes) reach a node's native listener: advertised, else bind host + port."""
    return info.advertised.get("native") or (f"{info.host}:{info.ports['native']}" if "native" in info.ports else None)


def encode_assignment(assignment: Assignment) -> bytes:
    return json.dumps({"node": assignment.node, "incarnation": assignment.incarnation,
                       "epoch": assignment.epoch}).encode()


def decode_assignment(data: bytes) -> Assignment:
    raw = json.loads(data)
    node = raw.get("node")
    return Assignment(None if node is None else str(node), int(raw.get("incarnation", 0)), int(raw["epoch"]))


def candidate_sequence(name: str) -> int:
    """The sequence number ZooKeeper appended to a candidate znode's name."""
    return int(name.rsplit("-", 1)[1])


@dataclass(frozen=True)
class Handover:
    """A request that the owner of ``epoch`` release the container (``released`` once it has)."""

    epoch: int
    released: bool = False

    def encode(self) -> bytes:
        return json.dumps({"epoch": self.epoch, "released": self.released}).encode()

    @staticmethod
    def decode(data: bytes) -> Handover:
        raw = json.loads(data)
        return Handover(int(raw["epoch"]), bool(raw["released"]))
