"""Transactions of native writers: Pravega's transaction API on the Kafka transaction coordinator.

A native transaction is a Kafka transaction under its own transactional id,
``millrace.txn:<scope>/<stream>:<txn uuid>`` (apart from Kafka's ids and from ``millrace.writer:``), so
several transactions of one writer are open at once, each with its own producer id and epoch, and
everything the coordinator guarantees holds for it: its record in ``_system/_tables/kafka_transactions``
is durable before any answer, its markers go into every partition it wrote, read_committed readers
see all of it or none, a Prepare* record left by a crash is completed at the next start, and an Ongoing
one past its timeout (the lease) aborts itself with a bumped epoch.

- ``BEGIN_TXN`` {scope, stream, txn_id, lease_ms}: a fresh producer id, the transaction Ongoing at once
  (the lease counts from here); answers the producer id, epoch and the stream's partition slices. The
  client chooses the uuid, so a begin whose answer was lost is resent and gets the same transaction.
- ``APPEND_TXN_EVENTS`` {scope, stream, txn_id, producer_id, epoch, partition} + one transactional
  RecordBatch v2: the partition joins the transaction durably the first time (AddPartitionsToTxn),
  then the batch is appended through ``PartitionStorage.append`` (sequences, duplicates, verification).
  Batches of one partition that arrive while it is joining wait for the join, in arrival order.
- ``END_TXN`` {scope, stream, txn_id, producer_id, epoch, commit}: answers once Complete* is durable
  (every marker written). Ending a transaction the way it already ended answers OK again.
- ``TXN_STATUS`` {scope, stream, txn_id}: state, producer id, epoch, lease, and per partition of the
  transaction the next sequence, so another process can resume it (``get_txn``).
- ``PING_TXN``: the lease counts again from now.

Complete (or never begun) records of ``millrace.txn:`` ids are forgotten after a retention
(``serve --native-txn-retention-ms``, default one hour), after which the status is unknown. Reactor thread.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka.partitions import PartitionError, PartitionLog
from millrace.gateway.kafka.resolve import record_logs
from millrace.gateway.kafka.topics import TopicInfo
from millrace.gateway.kafka.transactions import TransactionMetadata, TxnState
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.native.event_commands import partitioned_stream, refusal, stream_key
from millrace.protocol.errors import (
    EventsRefusedError,
    InvalidRequestError,
    RetriableError,
    StreamNotFoundError,
    TxnFailedError,
    TxnNotFoundError,
)
from millrace.protocol.events import TRANSACTIONAL_ATTRIBUTE
from millrace.protocol.wire import Command

TXN_ID_PREFIX = "millrace.txn:"

# attributes (offset 21), producer id (43) and epoch (51) of a RecordBatch v2 header
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")
_BATCH_HEADER_BYTES = 61

# The coordinator's states as Pravega's TxnStatus names them; Empty is a begin that never finished.
_STATES = {
    TxnState.ONGOING: "OPEN",
    TxnState.PREPARE_COMMIT: "COMMITTING",
    TxnState.COMPLETE_COMMIT: "COMMITTED",
    TxnState.PREPARE_ABORT: "ABORTING",
    TxnState.COMPLETE_ABORT: "ABORTED",
    TxnState.EMPTY: "ABORTED",
}
_ENDED = {True: (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT),
          False: (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.EMPTY)}

Handler = Callable[[dict[str, Any], bytes], "defer.Deferred[Any] | dict[str, Any]"]


def transactional_id(scope: str, stream: str, txn_id: str) -> str:
    return f"{TXN_ID_PREFIX}{scope}/{stream}:{txn_id}"


def _txn_id(h: dict[str, Any]) -> str:
    raw = str(h["txn_id"])
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise InvalidRequestError(f"txn_id {raw!r} is not a UUID") from None


def _failure(code: ErrorCode, what: str) -> Exception:
    """A coordinator refusal as the client's exception."""
    if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        return TxnNotFoundError(f"{what}: no such transaction")
    if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return RetriableError(f"{what}: {code.name}")
    if code == ErrorCode.INVALID_TRANSACTION_TIMEOUT:
        return InvalidRequestError(f"{what}: the lease must be 1 ms .. 15 minutes")
    return TxnFailedError(f"{what}: the transaction is not open ({code.name})")


def txn_handlers(broker: Broker) -> dict[int, Handler]:
    retention_ms = broker.config.native_txn_retention_ms
    # (transactional id, topic, partition) -> appends waiting while the partition joins the transaction
    joining: dict[tuple[str, str, int], list[defer.Deferred[ErrorCode]]] = {}

    def expire() -> None:
        broker.transactions.expire_idle(TXN_ID_PREFIX, retention_ms)

    expiry = task.LoopingCall(expire)
    expiry.start(min(60.0, max(retention_ms / 4000, 0.5)), now=False)

    def topic_of(h: dict[str, Any]) -> str:
        return stream_key(broker, h)

    def current(h: dict[str, Any]) -> tuple[str, TransactionMetadata | None]:
        tid = transactional_id(str(h["scope"]), str(h["stream"]), _txn_id(h))
        return tid, broker.transactions.txns.get(tid)

    def begin(h: dict[str, Any], _payload: bytes) -> defer.Deferred[Any]:
        scope, stream, name = str(h["scope"]), str(h["stream"]), topic_of(h)
        tid = transactional_id(scope, stream, _txn_id(h))
        lease_ms = int(h["lease_ms"])
        found = partitioned_stream(broker, scope, stream)

        def start(topic: TopicInfo) -> defer.Deferred[dict[str, Any]]:
            def begun(outcome: tuple[ErrorCode, int, int]) -> dict[str, Any]:
                error, producer_id, epoch = outcome
                if error == ErrorCode.CONCURRENT_TRANSACTIONS:
                    raise RetriableError(f"beginning {tid}: a begin of it is under way")
                if error != ErrorCode.NONE:
                    raise _failure(error, f"beginning {tid}")
                slices = (broker.topics.record(name) or topic).slices
                return {"producer_id": producer_id, "epoch": epoch, "slices": [list(s) for s in slices],
                        "lease_ms": lease_ms}

            return broker.transactions.begin_transaction(tid, lease_ms).addCallback(begun)

        return found.addCallback(start)

    def join(tid: str, producer_id: int, epoch: int, topic: str, partition: int) -> defer.Deferred[ErrorCode]:
        """The partition in the transaction, durably (AddPartitionsToTxn); callers in arrival order."""
        key = (tid, topic, partition)
        waiting = joining.get(key)
        if waiting is not None:
            d: defer.Deferred[ErrorCode] = defer.Deferred()
            waiting.append(d)
            return d
        meta = broker.transactions.txns.get(tid)
        if (meta is not None and meta.state == TxnState.ONGOING and (topic, partition) in meta.partitions
                and (meta.producer_id, meta.producer_epoch) == (producer_id, epoch)):
            return defer.succeed(ErrorCode.NONE)  # joined and durable (a pending join is in `joining`)
        first: defer.Deferred[ErrorCode] = defer.Deferred()
        joining[key] = [first]

        def joined(code: ErrorCode) -> None:
            # The first caller is first in the list: appends proceed in the order they arrived.
            for d in joining.pop(key):
                d.callback(code)

        broker.transactions.add_partitions(tid, producer_id, epoch, [(topic, partition)],
                                           ErrorCode.PRODUCER_FENCED).addCallback(joined)
        return first

    def append(h: dict[str, Any], payload: bytes) -> defer.Deferred[Any]:
        scope, stream, name = str(h["scope"]), str(h["stream"]), topic_of(h)
        tid = transactional_id(scope, stream, _txn_id(h))
        partition, producer_id, epoch = int(h["partition"]), int(h["producer_id"]), int(h["epoch"])
        if len(payload) < _BATCH_HEADER_BYTES:
            raise EventsRefusedError(f"a batch of {len(payload)} bytes is shorter than a batch header",
                                     int(ErrorCode.CORRUPT_MESSAGE))
        (attributes,) = _ATTRIBUTES.unpack_from(payload, 21)
        if not attributes & TRANSACTIONAL_ATTRIBUTE:
            raise InvalidRequestError("a transaction's batch carries the transactional attribute")
        if _PRODUCER.unpack_from(payload, 43) != (producer_id, epoch):
            raise InvalidRequestError("the batch's producer id and epoch are not the transaction's")
        topic = broker.topics.record(name)
        if topic is None:
            raise StreamNotFoundError(f"{scope}/{stream}")
        if not 0 <= partition < topic.partition_count:
            raise StreamNotFoundError(f"{scope}/{stream} has no partition {partition}")

        def store(code: ErrorCode) -> defer.Deferred[Any]:
            if code != ErrorCode.NONE:
                raise _failure(code, f"writing to {tid}")
            return record_logs(broker, topic).addCallback(write)

        def write(found: tuple[TopicInfo, list[PartitionLog]]) -> defer.Deferred[int]:
            current_topic, parts = found
            return broker.partitions.append(current_topic, parts[partition], memoryview(payload))

        def refused(failure: Failure) -> Failure:
            exc = failure.value
            if isinstance(exc, PartitionError):
                code = ErrorCode(exc.error_code)
                if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH,
                            ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
                    return Failure(_failure(code, f"writing to {tid}"))
                return Failure(refusal(code, str(exc)))
            return failure

        return join(tid, producer_id, epoch, name, partition).addCallback(store).addCallbacks(
            lambda base: {"offset": base}, refused)

    def end(h: dict[str, Any], _payload: bytes) -> defer.Deferred[Any]:
        tid, _ = current(h)
        producer_id, epoch, commit = int(h["producer_id"]), int(h["epoch"]), bool(h["commit"])

        def ended(code: ErrorCode) -> dict[str, Any]:
            meta = broker.transactions.txns.get(tid)
            if code == ErrorCode.NONE:
                return {"state": "COMMITTED" if commit else "ABORTED"}
            if meta is None:
                raise TxnNotFoundError(f"{tid}: no such transaction")
            if meta.state in _ENDED[commit]:
                if meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY):
                    # e.g. an abort of a transaction its lease had aborted (with a bumped epoch) already
                    return {"state": "COMMITTED" if commit else "ABORTED"}
                raise RetriableError(f"{tid} is being {'committed' if commit else 'aborted'}")
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT,
                              TxnState.COMPLETE_ABORT):
                raise TxnFailedError(f"{tid} is {_STATES[meta.state].lower()}, it cannot be "
                                     f"{'committed' if commit else 'aborted'}")
            raise _failure(code, f"ending {tid}")

        return broker.transactions.end_txn(tid, producer_id, epoch, commit, ErrorCode.PRODUCER_FENCED).addCallback(
            ended)

    def status(h: dict[str, Any], _payload: bytes) -> dict[str, Any]:
        tid, meta = current(h)
        if meta is None:
            return {"state": "UNKNOWN"}
        name = topic_of(h)
        topic = broker.topics.record(name)
        answer: dict[str, Any] = {"state": _STATES.get(meta.state, "UNKNOWN"), "producer_id": meta.producer_id,
                                  "epoch": meta.producer_epoch, "lease_ms": meta.timeout_ms, "sequences": {},
                                  "slices": [list(s) for s in topic.slices] if topic is not None else []}
        numbers = sorted(p for t, p in meta.partitions if t == name)
        parts = broker.partitions.loaded(name) or []
        for number in numbers:
            producer = parts[number].producers.get(meta.producer_id) if number < len(parts) else None
            next_sequence = 0
            if producer is not None and producer.epoch == meta.producer_epoch and producer.batches:
                next_sequence = producer.batches[-1][1] + 1
            answer["sequences"][str(number)] = next_sequence
        return answer

    def ping(h: dict[str, Any], _payload: bytes) -> defer.Deferred[Any]:
        tid, _ = current(h)

        def pinged(code: ErrorCode) -> dict[str, Any]:
            if code != ErrorCode.NONE:
                raise _failure(code, f"extending the lease of {tid}")
            return {}

        return broker.transactions.extend_lease(tid, int(h["producer_id"]), int(h["epoch"])).addCallback(pinged)

    return {Command.BEGIN_TXN: begin, Command.APPEND_TXN_EVENTS: append, Command.END_TXN: end,
            Command.TXN_STATUS: status, Command.PING_TXN: ping}
