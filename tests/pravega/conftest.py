"""A real server per module serving Pravega's controller API, for Pravega's own clients' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace import StreamManager
from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("data")), "--pravega-controller-port", "0",
                       "--pravega-segment-port", "0") as running:
        yield running


@pytest.fixture
def controller_uri(server: ServerProcess) -> str:
    """What Pravega's clients are given: the controller's URI."""
    return f"tcp://127.0.0.1:{server.pravega_controller_port}"


@pytest.fixture
def millrace_sm(server: ServerProcess) -> Iterator[StreamManager]:
    """Millrace's own client of the same server, to see what Pravega's client did."""
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as manager:
        yield manager
