"""A Kafka listener's node settings: its identity, the limits it holds requests to, and the timings of
its groups, transactions and retention."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field


@dataclass
class KafkaConfig:
    scope: str = "kafka"  # Kafka topics are streams in this scope
    node_id: int = 0
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 9092
    cluster_id: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_request_bytes: int = 100 * 1024 * 1024
    max_message_bytes: int = 8 * 1024 * 1024  # largest record batch accepted
    # Kafka's quota.window.num and quota.window.size.seconds: client quotas' rates are measured over these
    quota_window_num: int = 11
    quota_window_seconds: float = 1.0
    # Kafka's broker fetch.max.bytes: the most record bytes one Fetch response returns, whatever it asks
    fetch_max_bytes: int = 55 * 1024 * 1024
    # The Fetch response bytes all connections may be reading at once (``Broker.fetch_memory``)
    fetch_memory_bytes: int = 16 * 1024 * 1024
    retention_check_seconds: float = 30.0  # how often retention.ms / retention.bytes are enforced
    # Kafka's group.initial.rebalance.delay.ms: a new group's first rebalance waits this long for more members
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 1000
    group_max_session_timeout_ms: int = 300000
    transaction_check_seconds: float = 1.0  # how often transactions past their timeout are looked for
    # Kafka's producer.id.expiration.ms: a partition forgets a producer idle this long (checked with retention)
    producer_id_expiration_ms: int = 86_400_000
    native_txn_retention_ms: int = 3_600_000  # a finished native transaction's status is kept this long
    # A topic whose index segments grew this many bytes since its last partition-state snapshot gets a
    # new one (checked with retention); a restart replays only what came after it.
    state_snapshot_bytes: int = 1 << 20
    # The one Kafka "log directory" (DescribeLogDirs, AlterReplicaLogDirs): the server's data dir, absolute
    log_dir: str = field(default_factory=lambda: os.path.abspath("millrace-data"))
