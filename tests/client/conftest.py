"""A real server per module for the native client's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from millrace import EventRead, EventStreamReader, StreamManager
from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("data"))) as running:
        yield running


@pytest.fixture
def uri(server: ServerProcess) -> str:
    return f"tcp://127.0.0.1:{server.native_port}"


@pytest.fixture
def sm(uri: str) -> Iterator[StreamManager]:
    """A manager of the module's server (modules that need another define their own)."""
    with StreamManager(uri) as manager:
        yield manager


def drain(reader: EventStreamReader[Any]) -> list[EventRead[Any]]:
    """Every event the reader has to give now, checkpoints left out (a short timeout ends it: what was
    written is durable)."""
    out: list[EventRead[Any]] = []
    while (event := reader.read_next_event(timeout=1.0)) is not None:
        if not event.is_checkpoint:
            out.append(event)
    return out
