"""Assembles the Kafka listener's parts over a running store and controller."""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.kafka.broker import Broker, KafkaConfig
from millrace.gateway.kafka.connection import KafkaFactory
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.group_store import GroupStore
from millrace.gateway.kafka.registry import load_handlers
from millrace.gateway.kafka.transactions import TransactionCoordinator
from millrace.store.contracts import SegmentService
from millrace.store.controller import Controller, RetentionType
from millrace.store.controller.subscribers import Subscribers
from millrace.store.errors import SegmentExistsError, TableKeyVersionMismatchError
from millrace.store.tables import NOT_EXISTS, TableStore
from millrace.streams.futures import every, on_reactor
from millrace.streams.partitions import SegmentPartitionStorage
from millrace.streams.producer_ids import ProducerIdAllocator
from millrace.streams.scaling import StreamScaling
from millrace.streams.topics import TopicInfo, TopicRegistry

log = logging.getLogger(__name__)
CLUSTER_TABLE = "_system/_tables/kafka_cluster"


def persistent_cluster_id(tables: TableStore) -> str:
    """The cluster id, made once (a base64 UUID, as Kafka's) and kept: clients notice a change."""
    with contextlib.suppress(SegmentExistsError):
        tables.create_table(CLUSTER_TABLE)
    key = b"cluster.id"
    fresh = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=")
    with contextlib.suppress(TableKeyVersionMismatchError):
        tables.put(CLUSTER_TABLE, [(key, fresh, NOT_EXISTS)])
    (entry,) = tables.get(CLUSTER_TABLE, [key])
    if entry is None:  # only if someone removed the key between our put and this read
        raise RuntimeError(f"the cluster id vanished from {CLUSTER_TABLE}")
    return entry.value.decode()


def build_kafka(
    store: SegmentService, controller: Controller, tables: TableStore, config: KafkaConfig, pool: ThreadPoolExecutor,
    load_groups: bool = True,
) -> tuple[Broker, KafkaFactory]:
    """Blocking (recovers Kafka metadata): call before the reactor runs. A cluster node builds on a
    worker thread while its reactor runs, with ``load_groups`` False: the group coordinator then loads
    on the reactor when first asked (its timers are the reactor's)."""
    load_handlers()
    config.cluster_id = persistent_cluster_id(tables)
    broker = Broker(store, controller, tables, config, pool)
    broker.quotas.load()
    broker.topics = TopicRegistry(controller, tables, config.scope)
    broker.partitions = SegmentPartitionStorage(store, broker.topics, tables, broker.blocking, IReactorTime(reactor),
                                                config.max_message_bytes)
    broker.topics.listeners.append(broker.partitions.topic_event)
    broker.topics.listeners.append(functools.partial(_forget_traffic, broker))
    broker.producer_ids = ProducerIdAllocator(tables)
    broker.partitions.producer_ids = broker.producer_ids
    broker.scaling = StreamScaling(broker)
    broker.groups = GroupCoordinator(config, GroupStore(tables, broker.blocking), broker.topics, broker.blocking,
                                     IReactorTime(reactor))
    if load_groups:
        broker.groups.load()  # groups and committed offsets come back before the listener opens
    broker.transactions = TransactionCoordinator(broker.partitions, broker.producer_ids, tables, broker.topics,
                                                 broker.blocking, broker.groups, broker.peers, config.node_id,
                                                 IReactorTime(reactor), config.transaction_check_seconds)
    broker.transactions.load()
    broker.partitions.transaction_check = broker.transactions.check_produce
    return broker, KafkaFactory(broker)


def _forget_traffic(broker: Broker, event: str, topic: TopicInfo) -> None:
    """TopicRegistry listener (a worker thread): a deleted topic's traffic series go, on the reactor."""
    if event == "deleted":
        on_reactor(broker.traffic.topic_deleted, topic.name)


def _retention_failed(failure: Failure, topic: str) -> None:
    log.warning("retention of %s failed: %s", topic, failure.getErrorMessage())


def _stream_retention(broker: Broker, name: str) -> tuple[int, int]:
    """Blocking: (retention ms, retention bytes), -1 meaning unlimited, from the retention policy of the
    native stream recorded under ``name`` (its configuration is the controller's, and may change). A
    consumption policy is applied here instead, by truncating the stream at the lower bound of its
    subscribers' retention cuts (the segments' new starts move the partitions' log starts); on a
    cluster by the elected controller alone, which runs every truncation."""
    scope, stream = broker.topics.stream_of(name)
    policy = broker.controller.get_stream(scope, stream).config.retention
    if policy.type == RetentionType.CONSUMPTION:
        if broker.cluster is None or broker.cluster.is_controller():
            Subscribers(broker.controller).enforce(scope, stream)
        return -1, -1
    if policy.type == RetentionType.TIME:
        return policy.value, -1
    if policy.type == RetentionType.SIZE:
        return -1, policy.value
    return -1, -1


def enforce_stream_retention(broker: Broker, name: str) -> Deferred[None]:
    """Look up a native stream's retention policy (worker pool), then apply it on the reactor."""

    def apply(limits: tuple[int, int]) -> None:
        topic = broker.topics.record(name)
        if topic is None or limits == (-1, -1):
            return
        for d in broker.partitions.enforce_stream_retention(topic, *limits):
            d.addErrback(_retention_failed, name)

    return broker.blocking(_stream_retention, broker, name).addCallback(apply)


def start_background(broker: Broker) -> task.LoopingCall:
    """Periodic work on the reactor: retention enforcement for every topic (its retention configs) and
    every stream event writers partitioned (its stream retention policy), expiry of idle producers'
    state in every partition, and snapshots of the partition state of topics that grew; the transaction coordinator
    finishes transactions a crash left prepared and aborts those past their timeout. Also loads, in the
    background, the partitions of every topic no request loaded yet (``warm_up``)."""
    broker.transactions.start()
    began = reactor.seconds()
    broker.partitions.warm_up().addCallback(
        lambda count: log.info("loaded %d topics in the %.1f s after the start", count, reactor.seconds() - began))

    def enforce() -> None:
        for name in broker.topics.names():
            topic = broker.topics.get(name)
            if topic is not None:
                for d in broker.partitions.enforce_retention(topic):
                    d.addErrback(_retention_failed, name)
                broker.partitions.cleaner.clean_topic(topic)  # compacted topics (rounds run off the reactor)
        for name in broker.topics.record_keys():
            if broker.topics.get(name) is None:  # not a Kafka topic: a native stream's record
                enforce_stream_retention(broker, name).addErrback(_retention_failed, name)
        broker.partitions.expire_producers(broker.config.producer_id_expiration_ms)
        broker.partitions.snapshot_round(broker.config.state_snapshot_bytes, broker.config.producer_id_expiration_ms)

    loop = every(broker.config.retention_check_seconds, enforce, "the retention and snapshot round")
    # A compaction round must not write on while the store closes after the reactor stops.
    reactor.addSystemEventTrigger("before", "shutdown", broker.partitions.cleaner.close)
    return loop
