"""Kafka's internal topics, ``__consumer_offsets`` and ``__transaction_state``, as clients see them.

Kafka keeps group and transaction state in these two compacted topics and lists them, flagged internal,
in Metadata (every topic, or by name) and DescribeTopicPartitions; clients with ``exclude.internal.topics``
filter them out themselves, and tools (admin clients, ``kafka-topics --describe``, offset monitors) expect
to find them. Millrace keeps that state in tables (``group_store``, the transaction state table), not in
Kafka logs, so the topics are views with nothing in them:

* one partition each, as a Kafka cluster configured with ``offsets.topic.num.partitions`` (and
  ``transaction.state.log.num.partitions``) 1: every group id (transactional id) maps to partition 0, and
  that partition's leader is the node FindCoordinator names for every group (transactional id): the
  owner of the groups (transactions) table's container on a cluster, this node alone;
* an empty log at offset 0: ListOffsets answers 0 for earliest and latest and -1 for a timestamp or the
  max timestamp, Fetch returns no records at offset 0 and OFFSET_OUT_OF_RANGE past it (the records
  Kafka would have there are in its own private format, which no client should parse);
* clients may not write them (Produce: INVALID_TOPIC_EXCEPTION, Kafka's answer to appends to internal
  topics from clients) nor create them again (CreateTopics: TOPIC_ALREADY_EXISTS).

The topic ids are fixed (derived from the names), so every node and every restart gives the same ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum

from millrace.gateway.kafka.broker import Broker
from millrace.gateway.kafka_protocol.errors import ErrorCode

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
PARTITION_COUNT = 1
# ListOffsets' special timestamps (ListOffsetsRequest.LATEST_TIMESTAMP and the ones after it).
_LATEST, _EARLIEST, _EARLIEST_LOCAL = -1, -2, -4


class Coordinates(Enum):
    """Whose state the topic holds in Kafka, and so which coordinator leads its partition."""

    GROUPS = "groups"
    TRANSACTIONS = "transactions"


@dataclass(frozen=True)
class InternalTopic:
    name: str
    topic_id: uuid.UUID
    coordinates: Coordinates
    partition_count: int = PARTITION_COUNT

    def leader(self, broker: Broker) -> int:
        """The node id leading every partition: the coordinator FindCoordinator names (-1: none now)."""
        cluster = broker.cluster
        if cluster is None:
            return broker.config.node_id
        node = (cluster.group_coordinator() if self.coordinates is Coordinates.GROUPS
                else cluster.transaction_coordinator())
        return -1 if node is None else node.node_id

    def partition_error(self, broker: Broker, partition: int) -> ErrorCode:
        """Whether this node can answer for ``partition`` (ListOffsets, Fetch), as a Kafka broker answers."""
        if not 0 <= partition < self.partition_count:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        leader = self.leader(broker)
        if leader < 0:
            return ErrorCode.LEADER_NOT_AVAILABLE
        if leader != broker.config.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE


def _topic(name: str, coordinates: Coordinates) -> InternalTopic:
    return InternalTopic(name, uuid.uuid5(uuid.NAMESPACE_URL, f"millrace:kafka-internal-topic:{name}"), coordinates)


INTERNAL_TOPICS: dict[str, InternalTopic] = {
    t.name: t for t in (_topic(CONSUMER_OFFSETS, Coordinates.GROUPS), _topic(TRANSACTION_STATE, Coordinates.TRANSACTIONS))
}
_BY_ID = {t.topic_id: t for t in INTERNAL_TOPICS.values()}


def internal_topic(name: str | None) -> InternalTopic | None:
    return INTERNAL_TOPICS.get(name) if name is not None else None


def internal_topic_by_id(topic_id: uuid.UUID) -> InternalTopic | None:
    return _BY_ID.get(topic_id)


def empty_log_offset(timestamp: int) -> tuple[int, int]:
    """ListOffsets' (offset, timestamp) on an empty log starting at 0: earliest and latest are 0;
    nothing has a timestamp, so a timestamp lookup and the max timestamp find no record."""
    if timestamp in (_LATEST, _EARLIEST, _EARLIEST_LOCAL):
        return 0, -1
    return -1, -1
