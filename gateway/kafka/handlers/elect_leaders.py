"""ElectLeaders (key 43): with one replica per partition, every partition already has its preferred leader.

Answered as Kafka 4.0's controller (``ReplicationControlManager.electLeaders``) answers when every partition
is led by its preferred replica: a preferred election (v0 always; ElectionType 0) and an unclean one
(ElectionType 1: the partition has a leader) are both ELECTION_NOT_NEEDED per named partition; an unknown
topic or partition answers UNKNOWN_TOPIC_OR_PARTITION with Kafka's message; a null partition list means
every topic, each listed with no partition results (Kafka leaves out partitions whose election is not
needed). Any other election type fails as Kafka's controller fails it (its enum lookup throws): the whole
request UNKNOWN_SERVER_ERROR, every named partition with it, as ``ElectLeadersRequest.getErrorResponse``.
"""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from millrace.gateway.security.acls import AclOperation, ResourceType

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType
_R = ElectLeadersResponse


@api(ElectLeadersRequest, 0, 2)
def handle_elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    registry = ctx.broker.topics
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    denied = not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER)
    if denied or election_type not in (PREFERRED, UNCLEAN):
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if denied else ErrorCode.UNKNOWN_SERVER_ERROR
        return _R(throttle_time_ms=0, error_code=error, replica_election_results=[
            _R.ReplicaElectionResult(topic=t.topic, partition_result=[
                _R.PartitionResult(partition_id=p, error_code=error, error_message=error.description)
                for p in t.partitions])
            for t in request.topic_partitions or ()])
    if request.topic_partitions is None:
        return _R(throttle_time_ms=0, error_code=0, replica_election_results=[
            _R.ReplicaElectionResult(topic=name, partition_result=[]) for name in registry.names()])

    def result(name: str, partition: int) -> ElectLeadersResponse.PartitionResult:
        topic = registry.get(name)
        if topic is None:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"
        elif not 0 <= partition < topic.partition_count:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{partition}"
        else:
            # The only replica leads: already the preferred leader, and a leader exists.
            error, message = ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.ELECTION_NOT_NEEDED.description
        return _R.PartitionResult(partition_id=partition, error_code=error, error_message=message)

    return _R(throttle_time_ms=0, error_code=0, replica_election_results=[
        _R.ReplicaElectionResult(topic=t.topic, partition_result=[result(t.topic, p) for p in t.partitions])
        for t in request.topic_partitions])
