"""The Pravega controller listener's life in ``millrace serve``: announced, refusing a port in use,
stopped cleanly with the server, and refused where it would bypass security."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from millrace.gateway.pravega.proto import controller_pb2 as pb
from millrace.gateway.pravega.proto.controller_pb2_grpc import ControllerServiceStub
from millrace.gateway.pravega_protocol import commands as wc
from tests.pravega.wire_client import WireClient
from tests.server_process import REPO_ROOT, ServerProcess, config_args


def test_served_then_stopped_cleanly(tmp_path: Path) -> None:
    server = ServerProcess(str(tmp_path / "data"), "--pravega-controller-port", "0",
                           "--pravega-segment-port", "0").start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.pravega_controller_port}") as channel:
            assert ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope="s")).status == (
                pb.CreateScopeStatus.SUCCESS)
        assert server.stop() == 0
        assert "millrace: stopped cleanly" in "".join(server.output)
    finally:
        server.kill()


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess(str(tmp_path / "data"), "--pravega-controller-port", str(port),
                               "--pravega-segment-port", "0")
        with pytest.raises(RuntimeError, match="cannot listen"):
            server.start()
        server.kill()


def test_refused_on_a_secured_server(tmp_path: Path) -> None:
    """It has no authentication yet: where the native listener authenticates it would open every stream."""
    secured = config_args(tmp_path, "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,NATIVE:SASL_PLAINTEXT",
                          "listener.name.native.sasl.enabled.mechanisms=PLAIN",
                          'listener.name.native.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.'
                          'PlainLoginModule required user_admin="admin-secret";')
    server = ServerProcess(str(tmp_path / "data"), "--pravega-controller-port", "0",
                           "--pravega-segment-port", "0", *secured)
    with pytest.raises(RuntimeError, match="no authentication or TLS yet"):
        server.start()
    server.kill()


def test_a_cluster_node_refuses_the_flag(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "millrace", "serve", "--data-dir", str(tmp_path),
                           "--zookeeper", "127.0.0.1:1", "--pravega-controller-port", "0"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 2
    assert "single node only" in done.stderr


def test_the_segment_store_closes_a_connection_that_never_says_hello(tmp_path: Path) -> None:
    """Hello is the Pravega segment store's login: without it, the listeners' login deadline applies."""
    server = ServerProcess(str(tmp_path / "data"), "--pravega-segment-port", "0",
                           "--override", "millrace.authentication.timeout.ms=1000").start()
    try:
        with socket.create_connection(("127.0.0.1", server.pravega_segment_port), timeout=10) as silent:
            started = time.monotonic()
            assert silent.recv(1) == b""  # closed by the server
            assert 0.8 <= time.monotonic() - started < 8
        with WireClient(server.pravega_segment_port) as greeted:
            time.sleep(1.5)
            assert greeted.call(wc.KeepAlive()) == wc.KeepAlive()  # said Hello: no deadline
    finally:
        server.kill()


def test_the_segment_store_connections_are_counted_in_metrics(tmp_path: Path) -> None:
    server = ServerProcess(str(tmp_path / "data"), "--pravega-segment-port", "0").start()
    try:
        def pravega_connections() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            return next(line for line in text.splitlines() if line.startswith('millrace_connections{listener="PRAVEGA"}'))

        with WireClient(server.pravega_segment_port):
            assert pravega_connections().endswith(" 1.0")
    finally:
        server.kill()
