"""A commit's merge lands every batch or fails: it looks a stream up afresh before it calls it gone, and
it fails, rather than finish, once its node no longer serves the transactions.

A cluster node that takes over the native transactions may not have read the topics table since the
stream was made through another node: it used to drop the committed batches as if the stream had been
deleted (seen under load in ``tests/cluster/test_native_transactions.py``: a transaction recorded
COMMITTED with none of its events in the stream).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock

from millrace.gateway.native.txn_merge import CommitMerge


class _Topics:
    """A registry that knows the stream only after a read of the topics table."""

    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.refreshes = 0

    def record(self, name: str) -> Any:
        return f"record of {name}" if self.refreshes and self.exists else None

    def refresh(self) -> None:
        self.refreshes += 1


class _Host:
    def __init__(self, topics: _Topics) -> None:
        self.topics = topics

    def blocking(self, fn: Any, *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        return defer.succeed(fn(*args, **kwargs))


def _merge(exists: bool) -> tuple[CommitMerge, list[Any], _Topics]:
    topics = _Topics(exists)
    merge = CommitMerge(_Host(topics), Clock(), lambda record: "kafka/orders", lambda: False)  # type: ignore[arg-type]
    landed: list[Any] = []

    def land_in(topic: Any, *args: Any) -> defer.Deferred[None]:
        landed.append(topic)
        return defer.succeed(None)

    merge._land_in = land_in  # type: ignore[method-assign]  # noqa: SLF001 - what the lookup hands on
    return merge, landed, topics


def test_a_stream_this_node_has_not_read_yet_is_looked_up_again_and_merged() -> None:
    merge, landed, topics = _merge(exists=True)
    merge._land("kafka/orders", "txn:1", 0, [(0, b"batch")], 0, [0, 0])  # noqa: SLF001
    assert topics.refreshes == 1
    assert landed == ["record of kafka/orders"]


def test_a_stream_missing_after_a_fresh_read_is_gone() -> None:
    merge, landed, topics = _merge(exists=False)
    done = merge._land("kafka/orders", "txn:1", 0, [(0, b"batch")], 0, [0, 0])  # noqa: SLF001
    assert topics.refreshes == 1 and landed == []
    assert done.called


def test_a_merge_whose_node_stops_serving_fails_instead_of_finishing(monkeypatch: Any) -> None:
    """Once another node serves the transactions, this node must not answer its merge as done: the
    caller would record COMMITTED over batches it never landed."""
    from millrace.gateway.native import txn_merge
    from millrace.protocol.errors import RetriableError

    topics = _Topics(exists=True)
    topics.refreshes = 1  # known here already
    stopped = [False]
    merge = CommitMerge(_Host(topics), Clock(), lambda record: "kafka/orders", lambda: stopped[0])  # type: ignore[arg-type]
    monkeypatch.setattr(txn_merge, "record_logs", lambda host, topic: defer.succeed((topic, ["partition 0"])))

    def append(topic: Any, log: Any, batch: bytes, events: Any) -> defer.Deferred[int]:
        stopped[0] = True  # the term ends while the batch is on its way
        return defer.succeed(7)

    merge.append_batch = append
    outcome = merge._land("kafka/orders", "txn:1", 0, [(0, b"batch")], 0, [0, 0])  # noqa: SLF001
    failures: list[Any] = []
    outcome.addErrback(failures.append)
    assert len(failures) == 1 and failures[0].check(RetriableError)


def test_a_committing_record_keeps_the_partition_count_and_older_records_still_load() -> None:
    """The count a commit routes against is durable with COMMITTING; a record written before it was
    kept loads without one (the merge then routes against the count it finds)."""
    import json
    import uuid

    from millrace.store.controller.transactions import TxnRecord, TxnState

    record = TxnRecord("plant", "line", uuid.uuid4(), "w", TxnState.OPEN, 1000, 2000, 1000, 0, ((0.0, 1.0),),
                       (("plant/line/0.#epoch.0#transaction.x", (0,)),))
    assert record.partition_count is None
    committing = record.moved(TxnState.COMMITTING, partition_count=3)
    assert TxnRecord.decode(committing.encode()) == committing
    assert TxnRecord.decode(committing.encode()).moved(TxnState.COMMITTED, ended_ms=5).partition_count == 3
    older = json.loads(committing.encode())
    del older["partition_count"]
    assert TxnRecord.decode(json.dumps(older).encode()) == record.moved(TxnState.COMMITTING)
