"""The ``millrace`` command."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.server import ServerOptions, serve


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the embedded single-node server")
    d = ServerOptions()
    p.add_argument("--data-dir", default=d.data_dir, help="where logs and local long-term storage live")
    p.add_argument("--host", default=d.host, help="interface the listeners bind to")
    p.add_argument("--native-port", type=int, default=d.native_port, help="native protocol port (0 = any free)")
    p.add_argument("--http-port", type=int, default=d.http_port, help="HTTP port (0 = any free)")
    p.add_argument("--containers", type=int, default=d.containers, help="number of segment containers")
    p.add_argument("--lts", default=None, help="long-term storage: a path or s3://BUCKET/PREFIX "
                   "(default: DATA_DIR/lts)")
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint URL for an S3-compatible server")
    p.add_argument("--cache-mb", type=int, default=d.cache_mb, help="read cache budget in MiB")
    p.add_argument("--log-level", default="INFO")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="millrace", description="Millrace stream storage")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        options = ServerOptions(
            data_dir=args.data_dir,
            host=args.host,
            native_port=args.native_port,
            http_port=args.http_port,
            containers=args.containers,
            lts=args.lts,
            s3_endpoint=args.s3_endpoint,
            cache_mb=args.cache_mb,
        )
        return serve(options)
    return 2


if __name__ == "__main__":
    sys.exit(main())
