"""Writes the Python modules of Pravega's controller gRPC interface (``proto/controller_pb2.py``, its type
stub ``controller_pb2.pyi`` and the service's ``controller_pb2_grpc.py``) from ``proto/controller.proto``
with grpcio-tools' ``protoc``.

``python -m millrace.gateway.pravega.generate`` regenerates them; ``--check`` only reports whether the
checked-in modules are current (a test does the same, so they cannot go stale). The generated modules are
committed, as the Kafka codec's are, so a server needs grpcio and protobuf at run time but never
grpcio-tools.

The proto is compiled from the directory holding the ``millrace`` package, under its package path, so
the service module imports its messages as ``millrace.gateway.pravega.proto.controller_pb2`` (protoc
writes imports from the path it was given).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().with_name("proto")
PROTO = "millrace/gateway/pravega/proto/controller.proto"  # relative to the directory holding millrace/
GENERATED = ("controller_pb2.py", "controller_pb2.pyi", "controller_pb2_grpc.py")
COMMAND = "python -m millrace.gateway.pravega.generate"


def _package_root() -> Path:
    """The directory holding the ``millrace`` package (the repository root in a checkout)."""
    import millrace

    return Path(millrace.__file__).resolve().parent.parent


def generate(out_dir: Path) -> None:
    """Compile the proto into ``out_dir`` (laid out under ``millrace/gateway/pravega/proto/`` there)."""
    from grpc_tools import protoc  # only generation needs grpcio-tools

    include = str(Path(protoc.__file__).with_name("_proto"))  # protoc's own well-known types
    status = protoc.main([
        "grpc_tools.protoc", f"-I{_package_root()}", f"-I{include}",
        f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", PROTO,
    ])
    if status != 0:
        raise RuntimeError(f"protoc failed ({status}) on {PROTO}")


def stale() -> list[str]:
    """The generated modules that differ from what the proto gives now (or are missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / Path(PROTO).parent
        return [name for name in GENERATED
                if not (PROTO_DIR / name).exists() or not filecmp.cmp(fresh / name, PROTO_DIR / name, shallow=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether the generated modules are current")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{PROTO_DIR / name} is stale: run {COMMAND}", file=sys.stderr)
        return 1 if names else 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name in GENERATED:
            (PROTO_DIR / name).write_bytes((Path(tmp) / Path(PROTO).parent / name).read_bytes())
    print(f"wrote {', '.join(GENERATED)} in {PROTO_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
