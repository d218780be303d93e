"""Fixtures shared by the Kafka listener tests (each module brings its own ``server``)."""

import pytest

from tests.kafka.wire import local


@pytest.fixture
def wire(server):
    """A raw Kafka connection to the module's server."""
    w = local(server.kafka_port, client_id="admin-test")
    yield w
    w.close()
