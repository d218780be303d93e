"""A transactional id's durable state, as Kafka's TransactionMetadata keeps it, and its table format.

One record per transactional id in ``_system/_tables/kafka_transactions`` (JSON): producer id and
epoch, timeout, state, the partitions and consumer groups of the ongoing transaction, the offsets it
will commit for those groups, and when it started. The record is written at every state change and
before the change is answered, so a restart finds every transaction where a client last saw it:
Ongoing ones run on to their timeout, PrepareCommit/PrepareAbort ones are completed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

from millrace.gateway.kafka.group_store import OffsetAndMetadata

TRANSACTIONS_TABLE = "_system/_tables/kafka_transactions"
RECORD_VERSION = 1
TopicPartition = tuple[str, int]


class TxnState(StrEnum):
    """Kafka's transaction states, under the names DescribeTransactions and ListTransactions use."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    # group id -> offsets to commit for it when the transaction commits (AddOffsetsToTxn adds the group)
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    start_ms: int = -1  # when the ongoing transaction began (-1: none)
    updated_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps({
            "v": RECORD_VERSION, "pid": self.producer_id, "epoch": self.producer_epoch, "timeout": self.timeout_ms,
            "state": str(self.state), "partitions": sorted(self.partitions), "start": self.start_ms,
            "updated": self.updated_ms,
            "offsets": {g: [[t, p, om.offset, om.leader_epoch, om.metadata, om.commit_timestamp]
                            for (t, p), om in sorted(offs.items())] for g, offs in self.offsets.items()},
        }).encode()

    @classmethod
    def decode(cls, transactional_id: str, raw: bytes) -> TransactionMetadata:
        d = json.loads(raw)
        return cls(
            transactional_id, d["pid"], d["epoch"], d["timeout"], TxnState(d["state"]),
            {(t, p) for t, p in d["partitions"]},
            {g: {(t, p): OffsetAndMetadata(o, e, m, ts) for t, p, o, e, m, ts in offs}
             for g, offs in d["offsets"].items()},
            d["start"], d["updated"],
        )
