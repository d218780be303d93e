"""NodeLinks (gateway/native/forwarding.py) without a cluster: the connect's outcome may arrive at
once, on the caller's own turn (a dead node's port refuses before the pool's future is even looked at),
and the callers queued for that connect must still get it."""

from __future__ import annotations

from typing import Any, cast

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.native.forwarding import NodeLinks
from millrace.protocol.messages import CreateScope
from millrace.store.cluster.connection import NotSentError
from tests.cluster.zookeeper_process import free_port


class _RefusingPool:
    """A Broker whose worker pool has already run the connect, which failed, when it answers."""

    def __init__(self) -> None:
        self.connects = 0

    def blocking(self, fn: Any, *args: Any) -> defer.Deferred[Any]:
        self.connects += 1
        try:
            return defer.succeed(fn(*args))
        except Exception:  # noqa: BLE001 - handed on as the Deferred's failure, as the pool does
            return defer.fail()


def test_a_connect_that_fails_at_once_fails_its_request_as_not_sent() -> None:
    pool = _RefusingPool()
    links = NodeLinks(cast(Broker, pool))
    outcomes: list[Failure] = []
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    links.request(address, CreateScope(scope="s")).addErrback(outcomes.append)
    assert len(outcomes) == 1 and outcomes[0].check(NotSentError), outcomes
    # The failed connect left nothing waiting: the next request connects again.
    links.request(address, CreateScope(scope="s")).addErrback(outcomes.append)
    assert len(outcomes) == 2 and outcomes[1].check(NotSentError)
    assert pool.connects == 2
