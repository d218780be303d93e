"""DescribeLogDirs (key 35) and AlterReplicaLogDirs (key 34): the node's one log directory.

Millrace keeps every partition in its data directory (durable logs there, long-term storage there or in
S3), so that is the one log directory Kafka clients see, as a Kafka broker with a single ``log.dirs``
entry. Answered as Kafka 4.0's ``ReplicaManager`` does (v0 of both was removed in 4.0, KIP-896):

* DescribeLogDirs: the directory, its volume's total and usable bytes (v4), and per requested partition
  (null = every partition) its size: the bytes of its record batches (``OffsetIndex.bytes``, what Kafka's
  ``log.size`` counts: batches above the log start), offset lag 0 (Kafka answers ``max(hw - leo, 0)``,
  and the high watermark never passes the log end), never a future log. Unknown topics or
  partitions are left out; topics with no requested partition too.
* AlterReplicaLogDirs: per partition (the last directory named for it wins, as Kafka's map does), a
  topic name too long for a future log's directory name answers INVALID_TOPIC_EXCEPTION, a directory
  other than this one LOG_DIR_NOT_FOUND, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION, and
  the partition's own directory NONE: a move to where it already is, which Kafka skips.
"""

from __future__ import annotations

import shutil
from typing import Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from millrace.gateway.kafka_protocol.messages.describe_log_dirs import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.resolve import Logs, record_logs

_D = DescribeLogDirsResponse
_A = AlterReplicaLogDirsResponse
# Kafka names a future log's directory "<topic>-<partition>.<32 hex digits>-future"; a file name holds 255.
_FUTURE_DIR_SUFFIX = len(".") + 32 + len("-future")
_MAX_FILE_NAME = 255


def _volume_bytes(path: str) -> tuple[int, int]:
    """Blocking (a filesystem call): the total and usable bytes of the volume holding ``path``."""
    usage = shutil.disk_usage(path)
    return usage.total, usage.free  # free = blocks available to unprivileged users, Java's getUsableSpace


@api(DescribeLogDirsRequest, 1, 4)
def handle_describe_log_dirs(ctx: RequestContext,
                             request: DescribeLogDirsRequest) -> defer.Deferred[DescribeLogDirsResponse]:
    broker = ctx.broker
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return defer.succeed(_D(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[]))
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    names = broker.topics.names() if wanted is None else sorted(n for n in wanted if broker.topics.get(n))
    topics = [t for t in (broker.topics.get(n) for n in names) if t is not None]
    logs = defer.gatherResults([record_logs(broker, t) for t in topics], consumeErrors=True)
    volume = broker.blocking(_volume_bytes, broker.config.log_dir)

    def answer(results: list[Any]) -> DescribeLogDirsResponse:
        found: list[Logs] = results[0]
        total, usable = results[1]
        described = []
        for topic, parts in found:
            indexes = range(topic.partition_count) if wanted is None else \
                sorted(p for p in wanted[topic.name] if 0 <= p < topic.partition_count)
            partitions = [_D.DescribeLogDirsPartition(partition_index=p, partition_size=parts[p].index.bytes,
                                                      offset_lag=0, is_future_key=False) for p in indexes]
            if partitions:
                described.append(_D.DescribeLogDirsTopic(name=topic.name, partitions=partitions))
        return _D(throttle_time_ms=0, error_code=0, results=[_D.DescribeLogDirsResult(
            error_code=0, log_dir=broker.config.log_dir, topics=described, total_bytes=total, usable_bytes=usable)])

    both: list[defer.Deferred[Any]] = [logs, volume]
    return defer.gatherResults(both, consumeErrors=True).addCallback(answer)


@api(AlterReplicaLogDirsRequest, 1, 2)
def handle_alter_replica_log_dirs(ctx: RequestContext,
                                  request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    registry = ctx.broker.topics
    # Kafka's partitionDirs map: each partition once (in first-named order here), the last directory wins.
    destinations: dict[str, dict[int, str]] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                destinations.setdefault(t.name, {})[p] = d.path

    may_alter = ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER)

    def outcome(name: str, partition: int, path: str) -> ErrorCode:
        if not may_alter:
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        if len(f"{name}-{partition}") + _FUTURE_DIR_SUFFIX > _MAX_FILE_NAME:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if path != ctx.broker.config.log_dir:
            return ErrorCode.LOG_DIR_NOT_FOUND
        topic = registry.get(name)
        if topic is None or not 0 <= partition < topic.partition_count:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NONE  # already there: nothing to move

    return _A(throttle_time_ms=0, results=[
        _A.AlterReplicaLogDirTopicResult(topic_name=name, partitions=[
            _A.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=outcome(name, p, path))
            for p, path in partitions.items()])
        for name, partitions in destinations.items()])
