"""Pipelined produce requests on one connection are applied in request order, also on a cluster node that
has not loaded the topic yet (it was just created through another node).

Found by the fault tests (tests/cluster/test_faults.py): two fresh idempotent confluent-kafka producers
writing to a topic right after it was created failed now and then with a *fatal* OUT_OF_ORDER_SEQUENCE
on their very first batch (base sequence 0), while the two batches pipelined behind it on the same
connection (sequences 3 and 4) were acknowledged: the leader answered in order but applied the later
requests before the first one, which was still waiting for the topic to load. librdkafka cannot recover
from that (the producer is dead), and Kafka's rule that a request sees the effects of every earlier
request on its connection (the design's ordering rule, docs/architecture.md) is broken. A single ``millrace serve`` does not show it (a topic
is loaded where it is created). ``streams/resolve.py`` now makes requests that find a topic being
resolved wait behind the one resolving it, in arrival order; without that this test fails in most rounds
(the third request lands at offset 0, the first two get OUT_OF_ORDER_SEQUENCE).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from millrace.gateway.commands.local_cluster import zookeeper_missing
from millrace.gateway.kafka_protocol.messages.init_producer_id import InitProducerIdRequest
from millrace.gateway.kafka_protocol.messages.produce import ProduceRequest
from millrace.protocol.records import NewRecord, build_record_batch
from tests.cluster.local_cluster import LocalClusterCli
from tests.kafka.wire import KafkaWire

pytestmark = pytest.mark.skipif(zookeeper_missing() is not None, reason=str(zookeeper_missing()))

INIT_PRODUCER_ID, PRODUCE = InitProducerIdRequest.API_KEY, ProduceRequest.API_KEY


def produce_request(topic: str, partition: int, batch: bytes) -> ProduceRequest:
    return ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def partition_leaders(wire: KafkaWire, topic: str, timeout: float = 30.0) -> dict[int, int]:
    """Each partition's leader, asked again (as a client refreshes its metadata) while the node answering
    has not loaded the new topic yet and names none (-1)."""
    deadline = time.monotonic() + timeout
    while True:
        leaders = {p.partition_index: p.leader_id for p in wire.metadata(12, [topic]).topics[0].partitions}
        if leaders and min(leaders.values()) >= 0:
            return leaders
        assert time.monotonic() < deadline, f"{topic}: no leader for some partitions: {leaders}"
        time.sleep(0.1)


def test_pipelined_produce_to_a_topic_created_through_another_node_applies_in_order(tmp_path: Path) -> None:
    with LocalClusterCli(tmp_path / "cluster", "--nodes", "3", "--containers", "4") as cluster:
        bootstraps = cluster.bootstrap.split(",")
        outcomes = []
        for round_ in range(5):
            topic = f"fresh{round_}"
            with KafkaWire.connect(bootstraps[0]) as creator:
                creator.create(topic, 6)
                leaders = partition_leaders(creator, topic)
            # A partition led by a node that did not create the topic, so it has not loaded it yet.
            partition, leader = next((p, n) for p, n in sorted(leaders.items()) if n != 1)
            with KafkaWire.connect(bootstraps[leader - 1]) as wire:
                pid = wire.request(INIT_PRODUCER_ID, 1, transactional_id=None, transaction_timeout_ms=60000)
                batches = [(0, 3), (3, 1), (4, 1)]  # (base sequence, records), as librdkafka pipelines them
                wire.submit_together([(PRODUCE, 9, produce_request(topic, partition, build_record_batch(
                    [NewRecord(key=None, value=f"{seq + i}".encode()) for i in range(count)],
                    producer_id=pid.producer_id, producer_epoch=pid.producer_epoch, base_sequence=seq)))
                    for seq, count in batches])
                answers = [wire.receive(30).responses[0].partition_responses[0] for _ in batches]
            outcomes.append([(a.error_code, a.base_offset) for a in answers])
        print(outcomes)
        assert all(o == [(0, 0), (0, 3), (0, 4)] for o in outcomes), outcomes
