"""A segment-store node in a process of its own, for the container failover test that SIGKILLs it.

``python -m tests.cluster.node_child HOSTS NODE_ID CONTAINERS SESSION_TIMEOUT REPLICAS LTS_DIR`` joins the
cluster with a ``SegmentContainerHost`` (replicated logs on REPLICAS, metadata in ZooKeeper, long-term
storage in LTS_DIR) and, for every container it starts, appends ``<container>:<n>;`` to segment
``seg-<container>`` in a loop, printing ``acked <container> <n>`` once each append is durable. It
prints ``ready`` once registered and runs until killed or its stdin closes.
"""

from __future__ import annotations

import logging
import sys
import threading

from millrace.store.cluster.containers import SegmentContainerHost
from millrace.store.cluster.layout import NodeInfo
from millrace.store.cluster.member import OwnershipTerm
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.containers.container import SegmentContainer
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.errors import StoreError
from millrace.store.lts.filesystem import FileSystemChunkStorage

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


def write_forever(container: SegmentContainer, container_id: int) -> None:
    """Append numbered records until the container stops serving us (stopped, handed over, fenced)."""
    name = f"seg-{container_id}"
    try:
        if not container.exists(name):
            container.create_segment(name, {}).result(30)
        # Continue the numbering a previous owner left (records are "<container>:<n>;").
        length = container.get_info(name).length
        existing = b""
        while len(existing) < length:
            existing += container.read(name, len(existing), length - len(existing)).result(30).data
        n = len([r for r in existing.split(b";") if r])
        while True:
            container.append(name, f"{container_id}:{n};".encode(), None, []).result(30)
            say(f"acked {container_id} {n}")
            n += 1
    except StoreError as exc:
        say(f"writer {container_id} ended: {type(exc).__name__}")


class WritingHost(SegmentContainerHost):
    def start_container(self, term: OwnershipTerm) -> None:
        super().start_container(term)
        container = self.container(term.container_id)
        say(f"start {term.container_id} {term.epoch}")
        threading.Thread(target=write_forever, args=(container, term.container_id), daemon=True).start()

    def stop_container(self, container_id: int) -> None:
        super().stop_container(container_id)
        say(f"stop {container_id}")


def main() -> None:
    hosts, node_id, containers, session_timeout, replicas, lts = sys.argv[1:7]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = ClusterNodeConfig(hosts, NodeInfo(node_id, "127.0.0.1"), int(containers),
                               ReplicationConfig(tuple(replicas.split(",")), 3, 2), float(session_timeout))
    node = ClusterNode(config, FileSystemChunkStorage(lts), host_factory=WritingHost).start()
    say("ready")
    sys.stdin.read()
    node.close()


if __name__ == "__main__":
    main()
