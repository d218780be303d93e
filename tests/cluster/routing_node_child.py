"""A cluster node in a process of its own that serves its containers to peers, for the routing tests.

``python -m tests.cluster.routing_node_child HOSTS NODE_ID CONTAINERS SESSION_TIMEOUT REPLICAS LTS_DIR``
binds a native listener on 127.0.0.1 (the gateway's own ``NativeProtocol``, segment commands only) over
``LocalSegments`` (the containers this node runs; CONTAINER_OFFLINE for others), joins the cluster
advertising that listener, prints ``ready <port>`` and runs until killed or its stdin closes.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from twisted.internet import protocol, reactor

from millrace.gateway.native.handler import NativeProtocol
from millrace.store.cluster.layout import NodeInfo
from millrace.store.cluster.node import ClusterNode, ClusterNodeConfig
from millrace.store.cluster.routing import LocalSegments
from millrace.store.durablelog.replication_config import ReplicationConfig
from millrace.store.lts.filesystem import FileSystemChunkStorage


class PeerFactory(protocol.ServerFactory):
    """Connections accepted before the node has started would find no containers: it starts first."""

    local: LocalSegments | None = None

    def buildProtocol(self, addr: Any) -> NativeProtocol:  # noqa: N802 - Twisted's name
        assert self.local is not None
        return NativeProtocol(self.local, {})  # type: ignore[arg-type]


def main() -> None:
    hosts, node_id, containers, session_timeout, replicas, lts = sys.argv[1:7]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    factory = PeerFactory()
    port = reactor.listenTCP(0, factory, interface="127.0.0.1").getHost().port  # type: ignore[attr-defined]
    config = ClusterNodeConfig(hosts, NodeInfo(node_id, "127.0.0.1", {"native": port}), int(containers),
                               ReplicationConfig(tuple(replicas.split(",")), 3, 2), float(session_timeout))
    node = ClusterNode(config, FileSystemChunkStorage(lts)).start()
    assert node.containers is not None
    factory.local = LocalSegments(node.containers, int(containers))

    def stop_when_stdin_closes() -> None:
        sys.stdin.read()
        reactor.callFromThread(reactor.stop)  # type: ignore[attr-defined]

    threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    print(f"ready {port}", flush=True)
    reactor.run()  # type: ignore[attr-defined]
    node.close()


if __name__ == "__main__":
    main()
