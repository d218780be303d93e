"""The ``millrace`` command."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import time
from dataclasses import fields
from typing import Any

from millrace.gateway.commands.cluster_cli import add_cluster_parser, run_cluster
from millrace.gateway.commands.groups_cli import add_groups_parser, run_groups
from millrace.gateway.commands.users_cli import add_users_parser, run_users
from millrace.gateway.shared.options import ServerOptions


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    """Every field of ``ServerOptions`` is a flag whose ``dest`` is the field's name (``server_options``)."""
    p = sub.add_parser("serve", help="run the embedded single-node server")
    d = ServerOptions()
    p.add_argument("--data-dir", default=d.data_dir, help="where logs and local long-term storage live")
    p.add_argument("--host", default=d.host, help="interface the listeners bind to")
    # MILLRACE_CONFIG: what a container image is given the file by (docker/compose.secure.yaml), as
    # Kafka's images take their settings from the environment.
    p.add_argument("--config", default=os.environ.get("MILLRACE_CONFIG") or None, metavar="FILE",
                   help="Kafka broker properties (server.properties): listeners, advertised.listeners, "
                        "listener.security.protocol.map, SASL and TLS settings by Kafka's names "
                        "(default: $MILLRACE_CONFIG)")
    p.add_argument("--override", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker property over --config's (repeatable), as kafka-server-start.sh takes it")
    p.add_argument("--add-scram-file", action="append", default=[], metavar="FILE",
                   help="SCRAM users to create at start unless they exist, one a line as kafka-storage.sh "
                        "format's --add-scram takes them: SCRAM-SHA-256=[name=admin,password=admin-secret] "
                        "(repeatable; keep the file 0600)")
    p.add_argument("--add-scram-env", action="append", default=[], metavar="VARIABLE",
                   help="an environment variable holding such lines (repeatable)")
    p.add_argument("--add-scram", action=_RefusedSecretFlag, metavar="CREDENTIAL",
                   help="refused: it would put a password on the command line; see --add-scram-file")
    p.add_argument("--kafka-port", type=int, default=d.kafka_port, help="Kafka protocol port (0 = any free)")
    p.add_argument("--native-port", type=int, default=d.native_port, help="native protocol port (0 = any free)")
    p.add_argument("--http-port", type=int, default=d.http_port, help="HTTP port (0 = any free)")
    p.add_argument("--pravega-controller-port", type=int, default=d.pravega_controller_port, metavar="PORT",
                   help="serve Pravega's controller gRPC API here, for Pravega's own clients (0 = any free; "
                        "default: not served)")
    p.add_argument("--pravega-segment-port", type=int, default=d.pravega_segment_port, metavar="PORT",
                   help="serve Pravega's segment store wire protocol here, for Pravega's own writers and "
                        "readers (0 = any free; default 12345 when --pravega-controller-port is given, else "
                        "not served); the controller API's getURI answers it")
    p.add_argument("--containers", type=int, default=d.containers, help="number of segment containers")
    p.add_argument("--lts", default=None, help="long-term storage: a path or s3://BUCKET/PREFIX "
                   "(default: DATA_DIR/lts)")
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint URL for an S3-compatible server")
    p.add_argument("--cache-mb", type=int, default=d.cache_mb, help="read cache budget in MiB")
    p.add_argument("--flush-age-seconds", type=float, default=d.flush_age_seconds,
                   help="flush a segment's new data to long-term storage once it is this old (or 8 MiB)")
    p.add_argument("--connection-budget-mb", type=int, default=d.connection_budget_mb,
                   help="MiB of requests one connection may hold unanswered (and appends not yet durable) "
                   "before it stops reading")
    p.add_argument("--container-budget-mb", type=int, default=d.container_budget_mb,
                   help="MiB of appends a container may hold before they are durable before the connections "
                   "writing to it stop reading")
    p.add_argument("--fetch-budget-mb", type=int, default=d.fetch_budget_mb,
                   help="MiB of Fetch response data all Kafka connections together may be reading at once; a "
                   "fetch over it returns less (at least one batch)")
    p.add_argument("--kafka-scope", default=d.kafka_scope, help="scope holding the streams of Kafka topics")
    p.add_argument("--no-auto-create-topics", dest="auto_create_topics", action="store_false",
                   help="refuse Metadata/Produce for unknown topics instead of creating them")
    p.add_argument("--default-partitions", type=int, default=d.default_partitions,
                   help="partitions of auto-created topics")
    p.add_argument("--scale-windows", type=_windows, default=d.scale_windows,
                   help="rate windows in seconds for auto-scaling, shortest first (e.g. 2,10,30)")
    p.add_argument("--scale-interval-seconds", type=float, default=d.scale_interval_seconds,
                   help="how often scaling policies are evaluated")
    p.add_argument("--scale-cooldown-seconds", type=float, default=d.scale_cooldown_seconds,
                   help="how long a segment made by a scale is left alone")
    p.add_argument("--retention-check-seconds", type=float, default=d.retention_check_seconds,
                   help="how often topic retention (retention.ms, retention.bytes) is enforced")
    p.add_argument("--transaction-check-seconds", type=float, default=d.transaction_check_seconds,
                   help="how often Kafka transactions past their transaction.timeout.ms are aborted")
    p.add_argument("--producer-id-expiration-ms", type=int, default=d.producer_id_expiration_ms,
                   help="forget a producer's idempotence state in a partition after it wrote nothing this long "
                        "(Kafka's producer.id.expiration.ms; checked every --retention-check-seconds)")
    p.add_argument("--state-snapshot-bytes", type=int, default=d.state_snapshot_bytes,
                   help="snapshot a topic's partition state once its index grew this many bytes (52 a "
                        "batch) since the last snapshot; a restart replays only the batches after it")
    p.add_argument("--native-txn-retention-ms", type=int, default=d.native_txn_retention_ms,
                   help="how long the status of a committed or aborted native transaction stays known")
    p.add_argument("--group-initial-rebalance-delay-ms", type=int, default=d.group_initial_rebalance_delay_ms,
                   help="how long a new consumer group's first rebalance waits for more members, extended by each "
                        "one arriving up to the rebalance timeout (Kafka's group.initial.rebalance.delay.ms)")
    p.add_argument("--log-replicas", default=None, metavar="HOST:PORT,...",
                   help="keep the containers' durable logs on these `millrace logd` replicas instead of local files")
    p.add_argument("--write-quorum", type=int, default=d.write_quorum, help="replicas each log entry is written to")
    p.add_argument("--ack-quorum", type=int, default=d.ack_quorum,
                   help="replicas that must have fsync'd an entry before it is acknowledged")
    p.add_argument("--log-curve-secret-key", default=None, metavar="FILE",
                   help="CURVE to the log replicas: this node's key pair (node.key_secret of `millrace curve-keys`)")
    p.add_argument("--log-curve-server-key", default=None, metavar="FILE",
                   help="CURVE to the log replicas: their public key (logd.key), the only one talked to")
    cluster = p.add_argument_group("cluster node", "with --zookeeper this server is one node of a cluster "
                                   "(needs --log-replicas and a shared --lts)")
    cluster.add_argument("--zookeeper", default=None, metavar="HOST:PORT[,...][/chroot]",
                         help="ZooKeeper connect string: join that cluster instead of running alone")
    cluster.add_argument("--node-id", default=None, metavar="N", help="this node's id (a number; its Kafka node id)")
    cluster.add_argument("--peer-port", type=int, default=d.peer_port,
                         help="port other nodes reach this node's containers on (0 = any free)")
    cluster.add_argument("--advertised-kafka", default=None, metavar="HOST:PORT",
                         help="the Kafka address clients are told (default: the bind address, or the host name "
                              "when bound to 0.0.0.0)")
    cluster.add_argument("--advertised-native", default=None, metavar="HOST:PORT",
                         help="the native address given to clients")
    cluster.add_argument("--advertised-peer", default=None, metavar="HOST:PORT",
                         help="the peer address given to other nodes")
    cluster.add_argument("--session-timeout", dest="session_timeout_seconds", type=float,
                         default=d.session_timeout_seconds,
                         help="ZooKeeper session timeout in seconds: a dead node's containers move after it")
    cluster.add_argument("--retry-bound", dest="retry_bound_seconds", type=float, default=d.retry_bound_seconds,
                         help="seconds a segment operation waits for its container to get a live owner")
    cluster.add_argument("--zookeeper-credentials", default=None, metavar="FILE",
                         help="the cluster's ZooKeeper digest identity (username=/password= lines, or a JAAS "
                              "file's Client section): this node authenticates with it and the cluster's znodes "
                              "are that identity's alone")
    cluster.add_argument("--peer-tls-keystore", default=None, metavar="FILE",
                         help="mutual TLS on the peer links: this node's certificate chain and private key (PEM), "
                              "signed by the cluster CA")
    cluster.add_argument("--peer-tls-truststore", default=None, metavar="FILE",
                         help="mutual TLS on the peer links: the cluster CA's certificate (PEM); only nodes it "
                              "signed are let in or dialled")
    cluster.add_argument("--zookeeper-tls-truststore", default=None, metavar="FILE",
                         help="TLS to ZooKeeper (--zookeeper names its secureClientPort): the certificate (PEM) of "
                              "the CA that signed ZooKeeper's, which must also name the host dialled")
    cluster.add_argument("--zookeeper-tls-keystore", default=None, metavar="FILE",
                         help="TLS to ZooKeeper: this node's certificate chain and private key (PEM), for a "
                              "ZooKeeper that asks for client certificates (ssl.clientAuth=need, its default)")
    p.add_argument("--log-level", default="INFO")


class _RefusedSecretFlag(argparse.Action):
    """A flag whose value would be a password: refused, since a process's command line is readable by every
    local user (``ps``, /proc/PID/cmdline) for as long as it runs, with where to put the secret instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} would put a password on the server's command line, where every local "
                     "user can read it while the server runs: give the same items, one a line, in a file only "
                     "the server's user can read (--add-scram-file FILE) or in an environment variable "
                     "(--add-scram-env VARIABLE)")


def _windows(text: str) -> tuple[float, ...]:
    """``--scale-windows 2,10,30`` as rate windows in seconds."""
    try:
        return tuple(float(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds like 2,10,30, got {text!r}") from None


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The parsed ``serve`` flags as the options the server is assembled from."""
    values = {f.name: getattr(args, f.name) for f in fields(ServerOptions)}
    listed = ("overrides", "add_scram_file", "add_scram_env")
    return ServerOptions(**values | {name: tuple(values[name]) for name in listed})


def _logd_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logd", help="run a log replica (tier 1 of replicated durable logs)")
    p.add_argument("--data-dir", default="./millrace-logd", help="where the replica's journal lives")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind")
    p.add_argument("--port", type=int, default=9190, help="ZeroMQ port (0 = any free)")
    p.add_argument("--curve-secret-key", default=None, metavar="FILE",
                   help="CURVE: this replica's key pair (ZeroMQ certificate, logd.key_secret of `millrace "
                        "curve-keys`); with --curve-authorized-keys, only those clients get in")
    p.add_argument("--curve-authorized-keys", default=None, metavar="DIR",
                   help="CURVE: the public keys (NAME.key files) of the nodes allowed in")
    keys = sub.add_parser("curve-keys", help="make a cluster's CURVE key pairs for the log replica links")
    keys.add_argument("--dir", required=True, help="where: DIR/logd (the replicas') and DIR/nodes (the nodes')")
    p.add_argument("--log-level", default="INFO")


def _admin_parsers(sub: argparse._SubParsersAction) -> None:
    def with_server(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--server", default="127.0.0.1:9090", help="native endpoint HOST:PORT")
        p.add_argument("--json", action="store_true", help="print JSON")
        return p

    scopes = sub.add_parser("scopes", help="manage scopes").add_subparsers(dest="action", required=True)
    with_server(scopes.add_parser("list"))
    with_server(scopes.add_parser("create")).add_argument("scope")
    with_server(scopes.add_parser("delete")).add_argument("scope")

    streams = sub.add_parser("streams", help="manage streams").add_subparsers(dest="action", required=True)
    with_server(streams.add_parser("list")).add_argument("scope")
    create = with_server(streams.add_parser("create"))
    create.add_argument("name", help="SCOPE/STREAM")
    create.add_argument("--segments", type=int, default=1, help="initial segment count")
    create.add_argument("--retention-ms", type=int, default=None)
    create.add_argument("--retention-bytes", type=int, default=None)
    for action in ("describe", "seal", "delete"):
        with_server(streams.add_parser(action)).add_argument("name", help="SCOPE/STREAM")
    split = with_server(streams.add_parser("split", help="split an open segment (manual scale)"))
    split.add_argument("name", help="SCOPE/STREAM")
    split.add_argument("segment", help="segment name, id, or number in the current epoch")
    how = split.add_mutually_exclusive_group()
    how.add_argument("--pieces", type=int, default=2, help="split into N pieces (default 2; at partition "
                     "boundaries for a Kafka topic)")
    how.add_argument("--at", type=_keys, default=None, help="split at these keys, e.g. 0.25,0.5")
    merge = with_server(streams.add_parser("merge", help="merge adjacent open segments (manual scale)"))
    merge.add_argument("name", help="SCOPE/STREAM")
    merge.add_argument("segments", nargs="+", metavar="SEGMENT", help="segment names, ids or numbers")


def _keys(text: str) -> list[float]:
    """``--at 0.25,0.5`` as a list of keys."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected keys like 0.25,0.5, got {text!r}") from None


def _split(name: str) -> tuple[str, str]:
    scope, sep, stream = name.partition("/")
    if not sep or not scope or not stream:
        raise SystemExit(f"millrace: expected SCOPE/STREAM, got {name!r}")
    return scope, stream


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 3, 6] as "0-3,6": a segment's partitions are mostly contiguous runs."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def _size(value: int | None) -> str:
    return "?" if value is None else str(value)  # None: the store does not know the segment


def _short(name: str) -> str:
    """A segment name without its ``scope/stream/`` prefix (the heading names the stream)."""
    return name.rsplit("/", 1)[-1]


def _print_stream(desc: dict[str, Any]) -> None:
    """A stream for humans: a heading, a table of its current segments, then its epochs."""
    count = desc.get("partition_count")
    live = {p for seg in desc["segments"] for p in seg.get("partitions") or ()}
    kind = "" if count is None else f", {count} partitions" if len(live) == count else \
        f", {len(live)} of its {count} partitions live"
    print(f"{desc['scope']}/{desc['stream']}: {desc['state']}, epoch {desc['epoch']}, "
          f"{len(desc['segments'])} open segments{kind}")
    print(f"  retention: {desc['config']['retention']['type']} {desc['config']['retention']['value']}; "
          f"scaling: {desc['config']['scaling']['type']}")
    windows = "/".join(f"{w:g}s" for w in desc.get("rate_windows", []))
    header = ["segment", "key range", "partitions", "container", "length", "stored", "start",
              f"events/s ({windows})", f"KiB/s ({windows})"]
    rows = []
    for seg in desc["segments"]:
        rates = seg.get("rates") or []
        rows.append([
            seg["name"],
            f"[{seg['key_start']:.4f}, {seg['key_end']:.4f})",
            "-" if seg.get("partitions") is None else _ranges(seg["partitions"]),
            str(seg["container"]),
            _size(seg.get("length")),
            _size(seg.get("storage_length")),
            _size(seg.get("start_offset")),
            "/".join(f"{r['events_per_s']:.1f}" for r in rates) or "-",
            "/".join(f"{r['kib_per_s']:.1f}" for r in rates) or "-",
        ])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    numeric = {3, 4, 5, 6}  # right-aligned columns
    for row in [header, *rows]:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  " + "  ".join(cells).rstrip())
    history = desc.get("history") or []
    if history:
        print("history:")
    for epoch in history:
        created = ", ".join(_short(s["name"]) for s in epoch["created"])
        line = f"  epoch {epoch['epoch']:<3} {_when(epoch['created_ms'])}  {epoch['reason']:<10}"
        if epoch["sealed"]:
            line += f" sealed {', '.join(_short(s['name']) for s in epoch['sealed'])} ->"
        print(f"{line} created {created}")
    pending = desc.get("pending_scale")
    if pending:
        print(f"  scaling to epoch {pending['epoch']} ({pending['reason']}): sealing {pending['sealed_ids']}")


def _admin(args: argparse.Namespace) -> int:
    from millrace.client.segments import SegmentClient
    from millrace.store.errors import StoreError

    host, _, port = args.server.rpartition(":")
    try:
        with SegmentClient(host or "127.0.0.1", int(port)) as client:
            out = _run_admin(client, args)
    except (StoreError, OSError) as exc:
        print(f"millrace: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    elif isinstance(out, dict) and "segments" in out:
        _print_stream(out)
    elif isinstance(out, list):
        print("\n".join(out))
    elif out is not None:
        print(out)
    return 0


def _run_admin(client: Any, args: argparse.Namespace) -> Any:
    if args.command == "scopes":
        if args.action == "list":
            return client.list_scopes()
        if args.action == "create":
            return {"created": client.create_scope(args.scope)}
        client.delete_scope(args.scope)
        return None
    if args.action == "list":
        return client.list_streams(args.scope)
    scope, stream = _split(args.name)
    if args.action == "create":
        retention = {}
        if args.retention_ms is not None:
            retention = {"type": "time", "value": args.retention_ms}
        elif args.retention_bytes is not None:
            retention = {"type": "size", "value": args.retention_bytes}
        return client.create_stream(scope, stream, args.segments, retention=retention)
    if args.action == "describe":
        return client.describe_stream(scope, stream)
    if args.action == "split":
        return client.split_segment(scope, stream, args.segment, args.pieces, args.at)
    if args.action == "merge":
        return client.merge_segments(scope, stream, args.segments)
    if args.action == "seal":
        client.seal_stream(scope, stream)
    else:
        client.delete_stream(scope, stream)
    return None


def log_twisted_warnings() -> None:
    """Twisted's own events at warning and above go to Python's logging, beside the server's. Until a
    program begins Twisted's log, Twisted writes only its critical events (to stderr) and keeps the rest
    in a start-up buffer of 200 that no one reads. Standard output stays the process's: the servers print
    their listeners and "ready" there."""
    from twisted.logger import (
        FilteringLogObserver,
        LogLevel,
        LogLevelFilterPredicate,
        STDLibLogObserver,
        globalLogBeginner,
    )

    observer = FilteringLogObserver(STDLibLogObserver(name="twisted"), [LogLevelFilterPredicate(LogLevel.warn)])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="millrace", description="Millrace stream storage")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _logd_parser(sub)
    _admin_parsers(sub)
    add_cluster_parser(sub)
    add_users_parser(sub)
    add_groups_parser(sub)
    args = parser.parse_args(argv)
    if args.command in ("serve", "logd"):
        # `kill -USR1 PID` prints every thread's stack to stderr, as jstack does for a JVM: the way to see
        # what a long-running server is stuck on without stopping it.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.command == "cluster":
        return run_cluster(args)
    if args.command == "users":
        return run_users(args)
    if args.command == "groups":
        return run_groups(args)
    if args.command in ("scopes", "streams"):
        return _admin(args)
    if args.command == "curve-keys":
        from millrace.store.durablelog.curve import create_cluster_keys

        try:
            made = create_cluster_keys(args.dir)
        except FileExistsError as e:
            print(f"millrace: {e}", file=sys.stderr)
            return 1
        for name, path in made.items():
            print(f"{name}: {path}")
        return 0
    if args.command in ("logd", "serve"):
        # Whatever a server or a log replica writes may hold credentials (the SCRAM table's segments reach
        # every log file, journal and chunk): the store opens its files 0600 itself, and this keeps
        # anything else the process writes (the console's history) to its owner as well.
        os.umask(0o077)
    if args.command == "logd":
        from millrace.store.logd.server import run_logd

        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run_logd(args.data_dir, args.host, args.port, args.curve_secret_key, args.curve_authorized_keys)
    if args.command == "serve":
        from millrace.gateway.commands.server import (
            serve,  # only here: logd and the admin commands start without it
        )

        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        log_twisted_warnings()
        options = server_options(args)
        if options.zookeeper:
            if options.pravega_controller_port is not None or options.pravega_segment_port is not None:
                print("millrace: --pravega-controller-port and --pravega-segment-port are served by a single node "
                      "only, not with --zookeeper",
                      file=sys.stderr, flush=True)
                return 2
            from millrace.gateway.commands.cluster_server import serve_cluster

            return serve_cluster(options)
        return serve(options)
    return 2


if __name__ == "__main__":
    sys.exit(main())
