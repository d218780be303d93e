"""The ``millrace`` command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from gateway.server import ServerOptions, serve


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the embedded single-node server")
    d = ServerOptions()
    p.add_argument("--data-dir", default=d.data_dir, help="where logs and local long-term storage live")
    p.add_argument("--host", default=d.host, help="interface the listeners bind to")
    p.add_argument("--kafka-port", type=int, default=d.kafka_port, help="Kafka protocol port (0 = any free)")
    p.add_argument("--native-port", type=int, default=d.native_port, help="native protocol port (0 = any free)")
    p.add_argument("--http-port", type=int, default=d.http_port, help="HTTP port (0 = any free)")
    p.add_argument("--containers", type=int, default=d.containers, help="number of segment containers")
    p.add_argument("--lts", default=None, help="long-term storage: a path or s3://BUCKET/PREFIX "
                   "(default: DATA_DIR/lts)")
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint URL for an S3-compatible server")
    p.add_argument("--cache-mb", type=int, default=d.cache_mb, help="read cache budget in MiB")
    p.add_argument("--kafka-scope", default=d.kafka_scope, help="scope holding the streams of Kafka topics")
    p.add_argument("--no-auto-create-topics", dest="auto_create_topics", action="store_false",
                   help="refuse Metadata/Produce for unknown topics instead of creating them")
    p.add_argument("--default-partitions", type=int, default=d.default_partitions,
                   help="partitions of auto-created topics")
    p.add_argument("--scale-windows", default=",".join(str(w) for w in d.scale_windows),
                   help="rate windows in seconds for auto-scaling, shortest first (e.g. 2,10,30)")
    p.add_argument("--scale-interval-seconds", type=float, default=d.scale_interval_seconds,
                   help="how often scaling policies are evaluated")
    p.add_argument("--scale-cooldown-seconds", type=float, default=d.scale_cooldown_seconds,
                   help="how long a segment made by a scale is left alone")
    p.add_argument("--retention-check-seconds", type=float, default=d.retention_check_seconds,
                   help="how often topic retention (retention.ms, retention.bytes) is enforced")
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


def _split(name: str) -> tuple[str, str]:
    scope, sep, stream = name.partition("/")
    if not sep or not scope or not stream:
        raise SystemExit(f"millrace: expected SCOPE/STREAM, got {name!r}")
    return scope, stream


def _print_stream(desc: dict[str, Any]) -> None:
    print(f"{desc['scope']}/{desc['stream']}: {desc['state']}, epoch {desc['epoch']}, "
          f"{len(desc['segments'])} open segments")
    print(f"  retention: {desc['config']['retention']['type']} {desc['config']['retention']['value']}; "
          f"scaling: {desc['config']['scaling']['type']}")
    print(f"  {'segment':<32} {'key range':<17} {'container':>9} {'length':>12}")
    for seg in desc["segments"]:
        key_range = f"[{seg['key_start']:.3f}, {seg['key_end']:.3f})"
        print(f"  {seg['name']:<32} {key_range:<17} {seg['container']:>9} {seg.get('length', 0):>12}")


def _admin(args: argparse.Namespace) -> int:
    from client.segments import SegmentClient
    from store.errors import StoreError

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
    if args.action == "seal":
        client.seal_stream(scope, stream)
    else:
        client.delete_stream(scope, stream)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="millrace", description="Millrace stream storage")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _admin_parsers(sub)
    args = parser.parse_args(argv)
    if args.command in ("scopes", "streams"):
        return _admin(args)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        options = ServerOptions(
            data_dir=args.data_dir,
            host=args.host,
            kafka_port=args.kafka_port,
            native_port=args.native_port,
            http_port=args.http_port,
            containers=args.containers,
            lts=args.lts,
            s3_endpoint=args.s3_endpoint,
            cache_mb=args.cache_mb,
            kafka_scope=args.kafka_scope,
            auto_create_topics=args.auto_create_topics,
            default_partitions=args.default_partitions,
            retention_check_seconds=args.retention_check_seconds,
            scale_windows=tuple(float(w) for w in args.scale_windows.split(",")),
            scale_interval_seconds=args.scale_interval_seconds,
            scale_cooldown_seconds=args.scale_cooldown_seconds,
        )
        return serve(options)
    return 2


if __name__ == "__main__":
    sys.exit(main())
