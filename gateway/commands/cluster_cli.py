"""``millrace cluster up|status|start|down --dir DIR``: a whole cluster on this machine, for development and
tests (ZooKeeper, log replicas and segment-store nodes as background processes on 127.0.0.1; the
processes are managed by ``gateway/commands/local_cluster.py``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from millrace.gateway.commands.local_cluster import ClusterError, ClusterSettings, LocalCluster
from millrace.gateway.security.properties import ConfigError, refuse_secrets_in_overrides


def add_cluster_parser(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="run a local cluster (ZooKeeper, logd replicas, nodes) in the background")
    actions = cluster.add_subparsers(dest="action", required=True)
    d = ClusterSettings()

    up = actions.add_parser("up", help="start a cluster (or the stopped processes of an existing one), wait until "
                            "it serves and print one JSON object: bootstrap, native endpoints, processes")
    up.add_argument("--dir", required=True, help="the cluster's directory (state, data, logs)")
    up.add_argument("--nodes", type=int, default=d.nodes, help="segment-store nodes")
    up.add_argument("--log-replicas", type=int, default=d.log_replicas, help="`millrace logd` processes")
    up.add_argument("--containers", type=int, default=d.containers, help="segment containers (fixed for the cluster)")
    up.add_argument("--write-quorum", type=int, default=d.write_quorum, help="replicas each log entry is written to")
    up.add_argument("--ack-quorum", type=int, default=d.ack_quorum,
                    help="replicas that must have fsync'd an entry before it is acknowledged")
    up.add_argument("--session-timeout", type=float, default=d.session_timeout,
                    help="nodes' ZooKeeper session timeout in seconds (a dead node's containers move after it)")
    up.add_argument("--lts", default=None, help="shared long-term storage: a path or s3://BUCKET/PREFIX "
                    "(default: DIR/lts)")
    up.add_argument("--s3-endpoint", default=None, help="S3 endpoint URL for an S3-compatible server")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds each process may take to serve")
    up.add_argument("--node-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for every node's `millrace serve` (repeat: --node-arg=--cache-mb "
                    "--node-arg=64)")
    up.add_argument("--config", default=None, metavar="FILE",
                    help="Kafka broker properties for every node (listeners, security, authorizer), as "
                    "`millrace serve --config`; each node's listeners get ports of their own")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property over --config's, for every node (repeatable)")
    up.add_argument("--secure", action="store_true",
                    help="secure every link: ZooKeeper digest ACLs, mutual TLS between nodes, CURVE to the log "
                    "replicas, SASL_SSL Kafka listeners with the authorizer; keys in DIR/secrets, the super "
                    "user admin's password printed once (and kept in DIR/secrets/admin.properties)")

    status = actions.add_parser("status", help="nodes, containers, owners, epochs, log ensembles and lag")
    status.add_argument("--dir", required=True, help="the cluster's directory")
    status.add_argument("--json", action="store_true", help="print JSON")

    start = actions.add_parser("start", help="start one stopped process again, on its old ports")
    start.add_argument("--dir", required=True, help="the cluster's directory")
    start.add_argument("--process", required=True, metavar="ROLE-N", help="e.g. node-2, logd-1, zookeeper-1")
    start.add_argument("--timeout", type=float, default=120.0, help="seconds it may take to serve")

    keys = actions.add_parser("keys", help="make a secured cluster's keys for a real deployment: a cluster CA, "
                              "each node's certificate, the log links' CURVE keys, the nodes' ZooKeeper identity")
    keys.add_argument("--dir", required=True, help="where to write them (made 0700; never overwritten)")
    keys.add_argument("--node", action="append", required=True, metavar="ID=HOST[,HOST...]",
                      help="a node's id and the host names and addresses it is reached at (repeat per node)")
    keys.add_argument("--zookeeper-user", default="millrace", help="the nodes' ZooKeeper digest user name")
    keys.add_argument("--zookeeper-host", default=None, metavar="HOST[,HOST...]",
                      help="TLS to ZooKeeper too: a certificate for ZooKeeper's secureClientPort, for the host names "
                      "and addresses the nodes reach it at (the nodes' flags then carry --zookeeper-tls-*)")

    down = actions.add_parser("down", help="stop every process (SIGTERM, then SIGKILL after --timeout)")
    down.add_argument("--dir", required=True, help="the cluster's directory")
    down.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a clean stop")


def run_cluster(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.dir)
    try:
        if args.action == "up":
            settings = ClusterSettings(
                nodes=args.nodes, log_replicas=args.log_replicas, containers=args.containers,
                write_quorum=args.write_quorum, ack_quorum=args.ack_quorum, session_timeout=args.session_timeout,
                lts=args.lts, s3_endpoint=args.s3_endpoint, node_args=list(args.node_arg),
                config=os.path.abspath(args.config) if args.config else None, overrides=list(args.override),
                secure=args.secure)
            try:
                refuse_secrets_in_overrides(settings.overrides)  # each node's command line would show them
                settings.kafka_listener_names()
            except (OSError, ConfigError) as exc:  # before any process starts
                print(f"millrace: bad Kafka configuration: {exc}", file=sys.stderr)
                return 2
            print(json.dumps(cluster.up(settings, args.timeout)), flush=True)
        elif args.action == "status":
            out = cluster.status()
            if args.json:
                print(json.dumps(out, indent=2))
            else:
                print_status(out)
        elif args.action == "keys":
            return make_keys(args)
        elif args.action == "start":
            print(json.dumps(cluster.start_process(args.process, args.timeout)), flush=True)
        else:
            report = cluster.down(args.timeout)
            for entry in report:
                detail = ""
                if "seconds" in entry:
                    detail = f" in {entry['seconds']} s" + ("" if entry.get("clean", True) else " (not cleanly)")
                print(f"{entry['name']:<12} pid {entry['pid'] or '-':<8} {entry['result']}{detail}")
            if any(e["result"] == "killed" or e.get("clean") is False for e in report):
                return 1
    except ClusterError as exc:
        print(f"millrace: {exc}", file=sys.stderr)
        return 1
    return 0


def node_names(specs: list[str]) -> dict[str, list[str]]:
    """``--node ID=HOST[,HOST...]`` items as node id -> names (ValueError naming a bad item)."""
    from millrace.store.cluster.layout import check_node_id

    nodes: dict[str, list[str]] = {}
    for spec in specs:
        node_id, sep, names = spec.partition("=")
        hosts = [h.strip() for h in names.split(",") if h.strip()]
        if not sep or not hosts:
            raise ValueError(f"--node {spec!r}: expected ID=HOST[,HOST...]")
        if check_node_id(node_id.strip()) in nodes:
            raise ValueError(f"--node {spec!r}: node {node_id} named twice")
        nodes[node_id.strip()] = hosts
    return nodes


def make_keys(args: argparse.Namespace) -> int:
    """``cluster keys``: the files, and each process's flags (paths only, never a secret)."""
    from millrace.gateway.commands.cluster_keys import create_cluster_secrets

    zookeeper = [h.strip() for h in (args.zookeeper_host or "").split(",") if h.strip()] or None
    try:
        keys = create_cluster_secrets(args.dir, node_names(args.node), args.zookeeper_user, zookeeper)
    except (ValueError, FileExistsError) as exc:
        print(f"millrace: {exc}", file=sys.stderr)
        return 1
    print(f"cluster keys in {keys.directory} (secret files are 0600; keep {keys.ca_key} offline)")
    print(f"  every logd:   millrace logd ... {' '.join(keys.logd_flags())}")
    for node_id in node_names(args.node):
        flags = keys.node_flags(node_id, zookeeper_tls=zookeeper is not None)
        print(f"  node {node_id}:{' ' * max(1, 7 - len(node_id))}millrace serve ... {' '.join(flags)}")
    if zookeeper is not None:
        print(f"  ZooKeeper's zoo.cfg: secureClientPort=<port> {' '.join(keys.zookeeper_tls_properties())} "
              "(no clientPort; the nodes' --zookeeper names the secureClientPort)")
    print(f"  Kafka TLS listeners: ssl.keystore.location=<the node's --peer-tls-keystore>, "
          f"ssl.truststore.location={keys.ca} (both ssl.*.type=PEM)")
    return 0


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_status(out: dict[str, Any]) -> None:
    """The status for humans: processes, nodes, containers, logs."""
    print(f"cluster {out['dir']}: zookeeper {out['zookeeper']}, bootstrap {out['bootstrap']}")
    print("processes:")
    _table(["name", "pid", "state", "ports"],
           [[p["name"], str(p["pid"] or "-"), "running" if p["running"] else "stopped",
             " ".join(f"{k}={v}" for k, v in p["ports"].items())] for p in out["processes"]])
    if "error" in out:
        print(out["error"])
        return
    print(f"nodes (controller: node {out['controller'] or 'none elected'}):")
    _table(["node", "process", "registered", "serving", "healthy", "containers"],
           [[n["id"], "running" if n["running"] else "stopped", "yes" if n["registered"] else "no",
             ",".join(k for k, up in n["serving"].items() if up) or "-",
             "-" if not n.get("health") else "yes" if n["health"]["healthy"] else "NO",
             ",".join(str(c) for c in n["containers"]) or "-"] for n in out["nodes"]])
    print("containers (log bytes: the owner's durable log not yet tiered and truncated):")
    _table(["container", "owner", "epoch", "state", "log bytes"],
           [[str(c["id"]), c["owner"] or "-", str(c["epoch"]), "owned" if c["owner_live"] else "NO LIVE OWNER",
             str(c.get("log_bytes", "-"))] for c in out["containers"]])
    print("logs:")
    rows = []
    for log in out["logs"]:
        replicas = " ".join(f"{r['address']}(last {r['last']}, lag {r['lag']})" if r["answered"] else f"{r['address']}(no answer)"
                            for r in log["replicas"])
        rows.append([log["name"], str(log["epoch"]), str(log["truncated"]),
                     f"{log['under_replicated']} of {log['fragments']}", replicas or "-"])
    _table(["log", "epoch", "truncated", "short fragments", "ensemble"], rows)
