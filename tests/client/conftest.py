"""A real server per module for the native client's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("data"))) as running:
        yield running


@pytest.fixture
def uri(server: ServerProcess) -> str:
    return f"tcp://127.0.0.1:{server.native_port}"
