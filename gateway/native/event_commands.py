"""Event writer commands of the native protocol: events go through the Kafka partition storage.

``OPEN_WRITER`` turns a writer id into a (producer id, epoch) through the transaction coordinator,
whose per-id state is durable and whose every open bumps the epoch (fencing older instances of the
id), and answers the stream's partition slices so the writer routes keys itself. ``APPEND_EVENTS``
appends one RecordBatch v2 (``millrace.protocol.events``) to one partition through
``PartitionStorage.append``, exactly as a Kafka Produce does: same offsets, idempotence (duplicates
answer the original offset), high watermark and scaling switches. Both run on the reactor.

Only streams the partition storage serves can take events: today the Kafka scope's (its topics).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.partitions import PartitionError
from millrace.gateway.kafka.resolve import topic_logs
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.errors import (
    EventsRefusedError,
    InvalidRequestError,
    RetriableError,
    StreamNotFoundError,
    WriterFencedError,
)
from millrace.protocol.wire import Command

WRITER_ID_PREFIX = "millrace.writer:"  # keeps writer ids apart from Kafka transactional ids
WRITER_LEASE_MS = 15 * 60 * 1000  # a writer holds no transaction, so the coordinator never times it out

_RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.CONCURRENT_TRANSACTIONS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
              ErrorCode.UNKNOWN_SERVER_ERROR}
_FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}


def _refusal(code: ErrorCode, message: str) -> Exception:
    if code in _RETRIABLE:
        return RetriableError(message)
    if code in _FENCED:
        return WriterFencedError(message)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return StreamNotFoundError(message)
    return EventsRefusedError(message, int(code))


def event_handlers(broker: Broker) -> dict[int, Callable[[dict[str, Any], bytes], defer.Deferred[Any]]]:
    def topic_of(h: dict[str, Any]) -> str:
        scope, stream = str(h["scope"]), str(h["stream"])
        if scope != broker.config.scope:
            raise InvalidRequestError(f"{scope}/{stream}: event writers serve the '{broker.config.scope}' "
                                      "scope only so far")
        return stream

    def open_writer(h: dict[str, Any], _payload: bytes) -> defer.Deferred[Any]:
        name = topic_of(h)
        writer_id = str(h["writer_id"])
        if not writer_id:
            raise InvalidRequestError("a writer id is not empty")
        topic = broker.topics.get(name)
        if topic is None:
            raise StreamNotFoundError(f"{h['scope']}/{name}")

        def opened(outcome: tuple[ErrorCode, int, int]) -> dict[str, Any]:
            error, producer_id, epoch = outcome
            if error != ErrorCode.NONE:
                raise _refusal(error, f"opening writer {writer_id}: {error.name}")
            current = broker.topics.get(name) or topic
            return {"producer_id": producer_id, "epoch": epoch, "slices": [list(s) for s in current.slices]}

        return broker.transactions.init_producer_id(WRITER_ID_PREFIX + writer_id, WRITER_LEASE_MS, -1,
                                                    -1).addCallback(opened)

    def append_events(h: dict[str, Any], payload: bytes) -> defer.Deferred[Any]:
        name = topic_of(h)
        partition = int(h["partition"])

        def append(found: Any) -> defer.Deferred[int]:
            if found is None:
                raise StreamNotFoundError(f"{h['scope']}/{name}")
            topic, parts = found
            if not 0 <= partition < len(parts):
                raise StreamNotFoundError(f"{h['scope']}/{name} has no partition {partition}")
            return broker.partitions.append(topic, parts[partition], memoryview(payload))

        def refused(failure: Failure) -> Failure:
            exc = failure.value
            if isinstance(exc, PartitionError):
                return Failure(_refusal(exc.error_code, str(exc)))
            return failure

        return topic_logs(broker, name, False).addCallback(append).addCallbacks(
            lambda base: {"offset": base}, refused)

    return {Command.OPEN_WRITER: open_writer, Command.APPEND_EVENTS: append_events}
