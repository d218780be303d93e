"""Fixtures for the Kafka client compatibility suite: a real ``millrace serve`` process per test module
(so a client that wedges or crashes the server does not take the other clients' results with it)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.server_process import ServerProcess

# Topics created implicitly (auto-create on Metadata) get this many partitions, so the produce and
# consume tests exercise per-partition offsets and ordering without depending on CreateTopics.
DEFAULT_PARTITIONS = 3


def start_server(data_dir: str, *extra_args: str) -> ServerProcess:
    server = ServerProcess(data_dir, "--default-partitions", str(DEFAULT_PARTITIONS), *extra_args).start()
    if "kafka" not in server.ports:
        server.kill()
        raise RuntimeError("server has no Kafka listener:\n" + "".join(server.output))
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(str(tmp_path_factory.mktemp("millrace")))
    try:
        yield srv
    finally:
        if srv.proc is not None and srv.proc.poll() is not None:
            srv.kill()
            pytest.fail(f"millrace server died during the module (exit {srv.proc.returncode}):\n"
                        + "".join(srv.output[-200:]))
        # After all the clients' traffic the server must still shut down cleanly on SIGTERM.
        try:
            rc = srv.stop(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            pytest.fail("millrace server did not stop within 30s of SIGTERM:\n" + "".join(srv.output[-200:]))
        if rc != 0:
            pytest.fail(f"millrace server exited {rc} on SIGTERM:\n" + "".join(srv.output[-200:]))


@pytest.fixture(autouse=True)
def server_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints what the server logged during a test (warnings and tracebacks only, at the log level the
    harness runs it with), so a failing client test shows the server-side cause next to it."""
    if "server" not in request.fixturenames:
        yield
        return
    srv: ServerProcess = request.getfixturevalue("server")
    before = len(srv.output)
    yield
    new = srv.output[before:]
    if new:
        print(f"--- millrace server output during {request.node.name} ({len(new)} lines, last 200) ---")
        print("".join(new[-200:]))


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (Kafka topic names allow [a-zA-Z0-9._-])."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in request.node.name)
    return f"{name[:60]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def group(topic: str) -> str:
    return f"g-{topic}"
