"""The native listener: one Twisted protocol per connection, dispatching to the segment store.

A request's bytes (and an append's, until durable) hold the connection's budget until its reply is
written; when the budget is full the connection stops reading (``gateway.framing``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from twisted.internet import defer, protocol
from twisted.python.failure import Failure

from millrace.gateway.framing import DEFAULT_CONNECTION_BUDGET_BYTES, BudgetedReceiver
from millrace.gateway.native.controller_commands import PartitionsOf, controller_handlers
from millrace.gateway.native.event_commands import event_handlers
from millrace.gateway.native.host import NativeHost
from millrace.gateway.native.table_commands import Answer, table_handlers
from millrace.gateway.native.txn_commands import txn_handlers
from millrace.protocol.contracts import AttributeUpdate, ReadResult, SegmentInfo
from millrace.protocol.errors import error_details, status_of
from millrace.protocol.wire import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    Command,
    Status,
    WireError,
    decode_body,
    encode_frame,
)
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller
from millrace.store.controller.kvtables import KeyValueTables
from millrace.store.futures import StoreFuture, mapped
from millrace.streams.futures import on_reactor
from millrace.streams.scaling import StreamScaling

log = logging.getLogger(__name__)


def _attribute_updates(raw: list[dict[str, Any]]) -> list[AttributeUpdate]:
    return [AttributeUpdate.from_wire(u) for u in raw]


class NativeProtocol(BudgetedReceiver):
    MAX_LENGTH = MAX_FRAME_BYTES

    def __init__(self, store: SegmentService, controller_commands: dict[int, Callable],
                 budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES) -> None:
        super().__init__(budget_bytes, "native-connection")
        self.store = store
        self._handlers: dict[int, Callable[[dict[str, Any], bytes], StoreFuture | Any]] = {
            # One server serves every segment; a cluster node's controller_commands answer with the owner.
            Command.GET_SEGMENT_OWNER: lambda h, p: {"container": store.container_id_of(h["segment"]),
                                                     "node": None, "native": None},
            # A cluster node's HELLO also names every node (``cluster_server``).
            Command.HELLO: lambda h, p: {"version": PROTOCOL_VERSION},
            **controller_commands,
            Command.CREATE_SEGMENT: lambda h, p: store.create_segment(h["segment"], h.get("attributes")),
            Command.APPEND: lambda h, p: store.append(
                h["segment"], p, h.get("expected_offset"), _attribute_updates(h.get("attributes", [])),
                int(h.get("events", 1)),  # a cluster node forwarding a Kafka batch keeps its rate count
            ),
            Command.READ: lambda h, p: store.read(
                h["segment"], int(h["offset"]), int(h["max_length"]), float(h.get("wait_ms", 0)) / 1000
            ),
            # Queries in their never-blocking forms: a cluster node's router asks another node.
            Command.GET_INFO: lambda h, p: store.get_info_future(h["segment"]),
            Command.SEAL: lambda h, p: store.seal(h["segment"]),
            Command.TRUNCATE: lambda h, p: store.truncate(h["segment"], int(h["offset"])),
            Command.DELETE: lambda h, p: store.delete(h["segment"]),
            Command.MERGE: lambda h, p: store.merge(h["target"], h["source"]),
            Command.UPDATE_ATTRIBUTES: lambda h, p: store.update_attributes(
                h["segment"], _attribute_updates(h["attributes"])
            ),
            Command.LIST_SEGMENTS: lambda h, p: mapped(store.list_segments_future(), lambda names: {"segments": names}),
            Command.SEGMENT_RATES: lambda h, p: mapped(store.segment_rates_future(h["segment"]), dataclasses.asdict),
        }

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        # Responses are small and latency-bound: never let Nagle hold one back for a delayed ACK.
        self.tcp.setTcpNoDelay(True)

    def stringReceived(self, body: memoryview) -> None:  # noqa: N802 - Twisted's name
        size = len(body)
        try:
            code, request_id, header, payload = decode_body(body)
        except WireError as exc:
            log.info("closing native connection from %s: %s", self.tcp.getPeer(), exc)
            self.tcp.loseConnection()
            return
        handler = self._handlers.get(code)
        if handler is None:
            self._reply_error(request_id, size, Status.UNKNOWN_COMMAND, f"unknown command {code}")
            return
        try:
            # The payload's one copy (the frame is a view of what the socket read); the container
            # keeps this very object.
            outcome = handler(header, bytes(payload))
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error status
            self._reply_exception(request_id, size, exc)
            return
        if isinstance(outcome, defer.Deferred):  # reactor-side work (event appends): fires on the reactor
            outcome.addCallbacks(lambda value: self._reply_value(request_id, size, value),
                                 lambda failure: self._reply_failure(request_id, size, failure))
        elif isinstance(outcome, StoreFuture):
            if outcome.done():  # e.g. a read served from the cache: answer in this reactor turn
                self._reply_future(request_id, size, outcome)
            else:
                outcome.add_done_callback(lambda f: on_reactor(self._reply_future, request_id, size, f))
        else:
            self._reply_value(request_id, size, outcome)

    def lengthLimitExceeded(self, length: int) -> None:  # noqa: N802 - Twisted's name
        log.info("closing native connection: frame of %d bytes exceeds %d", length, self.MAX_LENGTH)
        self.tcp.loseConnection()

    def _reply_future(self, request_id: int, size: int, fut: StoreFuture) -> None:
        exc = fut.exception()
        if exc is not None:
            self._reply_exception(request_id, size, exc)
        else:
            self._reply_value(request_id, size, fut.result())

    def _reply_failure(self, request_id: int, size: int, failure: Failure) -> None:
        exc = failure.value
        self._reply_exception(request_id, size, exc if exc is not None else RuntimeError(failure.getErrorMessage()))

    def _reply(self, frame: bytes, size: int) -> None:
        """Write a reply; the request's ``size`` bytes stop holding the budget."""
        self.tcp.write(frame)
        self.answered(size)

    def _reply_value(self, request_id: int, size: int, value: Any) -> None:
        if isinstance(value, ReadResult):
            frame = encode_frame(
                Status.OK, request_id, {"offset": value.offset, "end_of_segment": value.end_of_segment}, value.data
            )
        elif isinstance(value, Answer):
            frame = encode_frame(Status.OK, request_id, value.header, value.payload)
        elif isinstance(value, SegmentInfo):
            frame = encode_frame(Status.OK, request_id, value.to_wire())
        elif isinstance(value, dict):
            frame = encode_frame(Status.OK, request_id, value)
        else:
            frame = encode_frame(Status.OK, request_id, {"value": value} if value is not None else None)
        self._reply(frame, size)

    def _reply_exception(self, request_id: int, size: int, exc: BaseException) -> None:
        status = status_of(exc)
        if status == Status.INTERNAL_ERROR:
            log.error("native request %d failed", request_id, exc_info=exc)
        self._reply_error(request_id, size, status, str(exc) or type(exc).__name__, error_details(exc))

    def _reply_error(self, request_id: int, size: int, status: Status, message: str,
                     extra: dict | None = None) -> None:
        self._reply(encode_frame(status, request_id, {"error": message, **(extra or {})}), size)


class NativeFactory(protocol.ServerFactory):
    def __init__(self, store: SegmentService, controller: Controller, pool: ThreadPoolExecutor, scaler: StreamScaling,
                 partitions_of: PartitionsOf | None = None,
                 connection_budget_bytes: int = DEFAULT_CONNECTION_BUDGET_BYTES,
                 broker: NativeHost | None = None, transactions: bool = True) -> None:
        """``broker``: the Kafka gateway whose partition storage takes native event appends (None: the
        listener serves no event writers); ``transactions``: serve its native transactions here (a
        cluster node installs the cluster's own handlers instead: ``txn_cluster``)."""
        self.store = store
        self.controller_commands = {
            **controller_handlers(controller, pool, scaler, partitions_of,
                                  broker.topics.delete_stream if broker is not None else None),
            **table_handlers(KeyValueTables(controller), controller.tables, pool),
            **(event_handlers(broker) if broker is not None else {}),
            **(txn_handlers(broker) if broker is not None and transactions else {}),
        }
        self.connection_budget_bytes = connection_budget_bytes

    def buildProtocol(self, addr: Any) -> NativeProtocol:  # noqa: N802 - Twisted's name
        return NativeProtocol(self.store, self.controller_commands, self.connection_budget_bytes)
