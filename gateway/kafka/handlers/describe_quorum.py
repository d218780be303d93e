"""DescribeQuorum (key 55): the controller quorum as Millrace has it, one node that is voter and leader.

Kafka's quorum is the Raft log ``__cluster_metadata``. Millrace's metadata lives in the controller's
system tables (``_system/_tables/scopes|streams|epochs``), each change one durable conditional append,
so their durable lengths summed are this node's metadata log end and, with a single voter, its high
watermark (in bytes where Kafka counts records; it only grows, as an offset does). Answered as Kafka
4.0's ``KafkaRaftClient.handleDescribeQuorumRequest`` on the leader of a static (``kraft.version`` 0)
quorum: anything but exactly ``__cluster_metadata`` partition 0 gets UNKNOWN_TOPIC_OR_PARTITION on each
requested partition; otherwise the leader is this node at epoch 1 (elected once; no other voter can
take over), the one voter with log end = high watermark and, being the leader, fetch and caught-up times
of now (v1+), no directory id (v2: static voters have none), no observers, and (v2) the node with the
listener it answers on.
"""

from __future__ import annotations

import time
import uuid

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.store.contracts import SegmentService

METADATA_TOPIC = "__cluster_metadata"
LEADER_EPOCH = 1
LISTENER_NAME = "PLAINTEXT"
#: The controller's system tables: every metadata change is an append to one of them.
METADATA_TABLES = ("_system/_tables/scopes", "_system/_tables/streams", "_system/_tables/epochs")
_R = DescribeQuorumResponse


def metadata_log_end(store: SegmentService) -> int:
    """Blocking: the durable bytes of the controller's system tables (those that exist yet)."""
    return sum(store.get_info(name).length for name in METADATA_TABLES if store.exists(name))


@api(DescribeQuorumRequest, 0, 2)
def handle_describe_quorum(ctx: RequestContext,
                           request: DescribeQuorumRequest) -> DescribeQuorumResponse | Deferred[DescribeQuorumResponse]:
    topics = request.topics
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return _R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.", topics=[],
                  nodes=[])
    if not (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0):
        return _R(error_code=0, error_message=None, topics=[
            _R.TopicData(topic_name=t.topic_name, partitions=[
                _R.PartitionData(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for p in t.partitions])
            for t in topics], nodes=[])
    config = ctx.broker.config
    version = ctx.api_version

    def answer(high_watermark: int) -> DescribeQuorumResponse:
        now_ms = int(time.time() * 1000) if version >= 1 else -1  # the times begin at v1
        voter = _R.ReplicaState(replica_id=config.node_id, replica_directory_id=uuid.UUID(int=0),
                                log_end_offset=high_watermark, last_fetch_timestamp=now_ms,
                                last_caught_up_timestamp=now_ms)
        nodes = [_R.Node(node_id=config.node_id, listeners=[
            _R.Listener(name=LISTENER_NAME, host=config.advertised_host, port=config.advertised_port)])]
        return _R(error_code=0, error_message=None, topics=[_R.TopicData(topic_name=METADATA_TOPIC, partitions=[
            _R.PartitionData(partition_index=0, error_code=0, error_message=None, leader_id=config.node_id,
                             leader_epoch=LEADER_EPOCH, high_watermark=high_watermark, current_voters=[voter],
                             observers=[])])],
            nodes=nodes if version >= 2 else [])

    return ctx.broker.blocking(metadata_log_end, ctx.broker.store).addCallback(answer)
