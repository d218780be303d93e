"""Assembles the Kafka listener's parts over a running store and controller."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from gateway.kafka.broker import Broker, KafkaConfig
from gateway.kafka.connection import KafkaFactory
from gateway.kafka.partition_log import PartitionLogs
from gateway.kafka.producer_ids import ProducerIdAllocator
from gateway.kafka.registry import load_handlers
from gateway.kafka.topics import TopicRegistry
from store.controller import Controller
from store.segment_store import SegmentStore
from store.tables import TableStore


def build_kafka(
    store: SegmentStore, controller: Controller, tables: TableStore, config: KafkaConfig, pool: ThreadPoolExecutor
) -> tuple[Broker, KafkaFactory]:
    """Blocking (recovers Kafka metadata): call before the reactor runs."""
    load_handlers()
    broker = Broker(store, controller, tables, config, pool)
    broker.topics = TopicRegistry(controller, tables, config.scope)
    broker.partitions = PartitionLogs(store, broker.topics, tables, broker.blocking)
    broker.partitions.load_all()
    broker.topics.listeners.append(broker.partitions.topic_event)
    broker.producer_ids = ProducerIdAllocator(tables)
    return broker, KafkaFactory(broker)
