"""A native commit cut off mid-merge, a split, and the commit resumed, all in this process over a real
segment store (the Twisted reactor runs once per process, so a test runs this as its own process).

The server's parts are built as ``millrace serve`` builds them (``build_kafka``: the topic registry,
partition storage, scaling) over a store of real file logs and chunk storage. A transaction writes
``BATCHES`` batches into the stream's only partition; its commit is decided (COMMITTING recorded) and its
merge lands the first ``LANDED`` batches, then every append fails, as if the node had died there, and the
transactions stop being served. The stream then splits inside that partition, retiring it, and a new
``NativeTransactions`` loads the records and finishes the commit over partitions rebuilt from the store,
as a restarted server does. Prints one JSON line: the numbers above and every record the stream's
segments hold, as [partition, key, value].

    python -m tests.client.txn_resume_process DATA_DIR
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.interfaces import IReactorTime

from millrace.gateway.kafka.broker import Broker, KafkaConfig
from millrace.gateway.kafka.setup import build_kafka
from millrace.gateway.native.event_commands import partitioned_stream
from millrace.gateway.native.txn_commands import NativeTransactions
from millrace.gateway.native.txn_merge import BatchAppender, local_batch_appender
from millrace.protocol import messages as m
from millrace.protocol.events import encode_batch
from millrace.protocol.records import iter_batches
from millrace.store.controller import Controller, StreamConfiguration
from millrace.store.controller.transactions import TxnState
from millrace.store.tables import TableStore
from millrace.streams.errors import PartitionError, Reason
from millrace.streams.partitions import PartitionLog
from millrace.streams.partitions.formats import ENVELOPE, ENVELOPE_MAGIC
from millrace.streams.partitions.writer_events import WriterEvents
from millrace.streams.topics import TopicInfo
from tests.storehelpers import open_store

SCOPE, STREAM = "plant", "line"
BATCHES = 6
EVENTS = 8  # per batch, on keys k0..k7 (both halves of the key space)
LANDED = 2  # batches the first pass lands before it is cut off


def cut_off(append: BatchAppender, landed: int, refused: defer.Deferred[None]) -> BatchAppender:
    """``append`` for the first ``landed`` batches, then a refusal for every one: a node that died after
    those appends. ``refused`` fires once the first is refused and those landed are durable."""
    calls: list[defer.Deferred[int]] = []

    def appender(topic: TopicInfo, log: PartitionLog, batch: bytes, events: WriterEvents) -> defer.Deferred[int]:
        if len(calls) < landed:
            calls.append(append(topic, log, batch, events))
            return calls[-1]
        if len(calls) == landed:
            calls.append(defer.succeed(0))  # only the first refusal fires ``refused``
            defer.DeferredList(calls[:landed], fireOnOneErrback=True).addCallbacks(
                lambda _: refused.callback(None), refused.errback)
        return defer.fail(PartitionError(Reason.NOT_OWNER, "the node died mid-commit"))

    return appender


def stored_records(broker: Broker) -> list[tuple[int, str, str]]:
    """Blocking: (partition, key, value) of every record in every segment the stream ever had."""
    found = []
    for segment in broker.topics.segment_history(broker.topics.key(SCOPE, STREAM)):
        length = broker.store.get_info(segment).length
        data = bytearray()
        while len(data) < length:
            data += broker.store.read(segment, len(data), length - len(data)).result(30).data
        position = 0
        while position < length:
            magic, _, partition, size = ENVELOPE.unpack_from(data, position)
            assert magic == ENVELOPE_MAGIC
            start = position + ENVELOPE.size
            for batch in iter_batches(memoryview(bytes(data[start:start + size]))):
                found += [(partition, (r.key or b"").decode(), (r.value or b"").decode()) for r in batch.records()]
            position = start + size
    return found


async def scenario(broker: Broker) -> None:
    clock = IReactorTime(reactor)
    await broker.blocking(broker.controller.create_scope, SCOPE)
    await broker.blocking(broker.controller.create_stream, SCOPE, STREAM, StreamConfiguration(initial_segments=1))
    await partitioned_stream(broker, SCOPE, STREAM)
    txn_id = uuid.uuid4()
    first = NativeTransactions(broker, clock, load=False)
    await defer.maybeDeferred(first.begin, m.BeginTxn(scope=SCOPE, stream=STREAM, txn_id=txn_id, lease_ms=600_000),
                              b"")
    for b in range(BATCHES):
        batch = encode_batch([(f"k{i}".encode(), f"{b}:{i}".encode()) for i in range(EVENTS)], int(time.time() * 1000))
        await first.append(m.AppendTxnEvents(scope=SCOPE, stream=STREAM, txn_id=txn_id, partition=0,
                                             first_event=b * EVENTS, last_event=b * EVENTS + EVENTS - 1), batch)

    refused: defer.Deferred[None] = defer.Deferred()
    first.merge.append_batch = cut_off(local_batch_appender(broker), LANDED, refused)
    ending = defer.maybeDeferred(first.end, m.EndTxn(scope=SCOPE, stream=STREAM, txn_id=txn_id, commit=True), b"")
    ending.addErrback(lambda _: None)  # it never finishes: the node "dies"
    await refused
    first.stop()
    found = await broker.blocking(first.table.get, SCOPE, STREAM, txn_id)
    assert found is not None and found[0].state == TxnState.COMMITTING, found

    (whole,) = await broker.blocking(broker.controller.get_current_segments, SCOPE, STREAM)
    await broker.blocking(broker.scaling.split, SCOPE, STREAM, whole.segment_id, at=[0.5])
    assert 0 in broker.topics.of_stream(SCOPE, STREAM).retired  # type: ignore[union-attr]

    # A restarted server knows what the partitions hold only from the store (their writer numbers from
    # the segments' attributes): rebuild them from it.
    key = broker.topics.key(SCOPE, STREAM)
    broker.partitions.reload(key)
    while broker.partitions.is_reloading(key):
        await task.deferLater(clock, 0.05, lambda: None)
    resumed = NativeTransactions(broker, clock)  # loads the records, as a restarted server does
    resumed.start()
    reply = await defer.maybeDeferred(resumed.end, m.EndTxn(scope=SCOPE, stream=STREAM, txn_id=txn_id, commit=True),
                                      b"")
    assert isinstance(reply, m.TxnStateReply) and reply.state == TxnState.COMMITTED.value, reply
    resumed.stop()
    print(json.dumps({"batches": BATCHES, "events": EVENTS, "landed": LANDED,
                      "records": await broker.blocking(stored_records, broker)}), flush=True)


def main(data_dir: str) -> None:
    store = open_store(data_dir)
    tables = TableStore(store)
    pool = ThreadPoolExecutor(4, "harness")
    broker, _ = build_kafka(store, Controller(store, tables), tables, KafkaConfig(log_dir=data_dir), pool)

    def run(_: Any) -> defer.Deferred[None]:
        return defer.ensureDeferred(scenario(broker))

    try:
        task.react(run)
    finally:
        pool.shutdown(wait=True)
        store.close()


if __name__ == "__main__":
    main(sys.argv[1])
