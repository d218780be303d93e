"""``/api/cluster`` on a cluster node: the live nodes, each container's owner and ownership epoch, the
controller and the group coordinator, as this node's ``KafkaCluster`` watches them in ZooKeeper (no
ZooKeeper read per request: the watches keep the picture current)."""

from __future__ import annotations

from typing import Any

from millrace.gateway.kafka.cluster import KafkaCluster


def describe_cluster(cluster: KafkaCluster, container_count: int) -> dict[str, Any]:
    """Nodes (Kafka id, address, the containers they own), containers (owner, epoch, whether the owner is
    live), the controller and the group coordinator (any thread)."""
    owned: dict[str, list[int]] = {}
    containers = []
    for cid in range(container_count):
        assignment = cluster.assignment(cid)
        live_owner = cluster.owner_info(cid)
        if live_owner is not None:
            owned.setdefault(live_owner.node_id, []).append(cid)
        containers.append({
            "id": cid,
            "owner": None if assignment is None else assignment.node,
            "epoch": None if assignment is None else assignment.epoch,
            "state": "owned" if live_owner is not None else "no live owner",
            "log_bytes": None,  # only the owner knows its durable log's size
        })
    controller = cluster.controller_info()
    coordinator = cluster.group_coordinator()
    nodes = [{"id": n.node_id, "host": n.host, "kafka_port": n.port, "live": True,
              "containers": owned.get(str(n.node_id), [])} for n in cluster.brokers()]
    return {"mode": "cluster", "this_node": cluster.node_id, "nodes": nodes, "containers": containers,
            "controller": None if controller is None else controller.node_id,
            "group_coordinator": None if coordinator is None else coordinator.node_id,
            "log_replicas": []}  # filled on the reactor: this node's own logs (resources.local_logs)
