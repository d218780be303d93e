"""Committed offsets: OffsetCommit (8), OffsetFetch (9, with the v8+ multi-group form) and
OffsetDelete (47). Topic and partition existence is checked here against the topic registry (as
Kafka's request layer does); the rest is the group coordinator's."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred, succeed

from millrace.gateway.kafka.broker import Broker, RequestContext, get_coordinator
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.group_store import OffsetAndMetadata
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from millrace.gateway.kafka_protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from millrace.gateway.kafka_protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from millrace.gateway.security.acls import AclOperation, ResourceType

OFFSET_COMMIT = OffsetCommitRequest.API_KEY
OFFSET_FETCH = OffsetFetchRequest.API_KEY
OFFSET_DELETE = OffsetDeleteRequest.API_KEY

TopicPartition = tuple[str, int]


def _partition_exists(broker: Broker, topic: str, partition: int) -> bool:
    info = broker.topics.get(topic)
    return info is not None and 0 <= partition < info.partition_count


def _by_topic(pairs: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    """Group (topic, partition) -> value pairs by topic, keeping first-seen order."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in pairs:
        out.setdefault(topic, []).append((partition, value))
    return out


@api(OffsetCommitRequest, 0, 9)
def handle_offset_commit(ctx: RequestContext,
                         request: OffsetCommitRequest) -> OffsetCommitResponse | Deferred[OffsetCommitResponse]:
    version = ctx.api_version
    now = int(time.time() * 1000)
    requested: list[TopicPartition] = []
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    group_denied = not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id)
    for topic in request.topics:
        topic_denied = not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            requested.append(tp)
            if group_denied or topic_denied:
                errors[tp] = (ErrorCode.GROUP_AUTHORIZATION_FAILED if group_denied
                              else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            if not _partition_exists(ctx.broker, topic.name, p.partition_index):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            # v1 carries a commit timestamp (-1: now); v2-v4 a retention time (-1: the broker's).
            commit_ts = p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now
            retention = request.retention_time_ms if 2 <= version <= 4 else -1
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                metadata=p.committed_metadata if p.committed_metadata is not None else "",
                commit_timestamp=commit_ts,
                expire_timestamp=now + retention if retention != -1 else None,
            )

    def respond(result: dict[TopicPartition, ErrorCode]) -> OffsetCommitResponse:
        errors.update(result)
        cls = OffsetCommitResponse
        return cls(throttle_time_ms=0, topics=[
            cls.OffsetCommitResponseTopic(name=topic, partitions=[
                cls.OffsetCommitResponsePartition(partition_index=p, error_code=int(e)) for p, e in parts])
            for topic, parts in _by_topic((tp, errors[tp]) for tp in requested).items()
        ])

    if not offsets:
        return respond({})
    # v0 has neither generation nor member id: the defaults (-1, "") make it a simple commit.
    generation = request.generation_id_or_member_epoch if version >= 1 else -1
    member_id = request.member_id if version >= 1 else ""

    def commit(coordinator: GroupCoordinator) -> Deferred[OffsetCommitResponse]:
        return coordinator.offsets.commit_offsets(request.group_id, member_id, request.group_instance_id, generation,
                                          offsets, version).addCallback(respond)

    return get_coordinator(ctx.broker).call(commit)


@api(OffsetFetchRequest, 0, 9)
def handle_offset_fetch(ctx: RequestContext,
                        request: OffsetFetchRequest) -> OffsetFetchResponse | Deferred[OffsetFetchResponse]:
    version = ctx.api_version
    cls = OffsetFetchResponse

    def unstable(group_id: str, require_stable: bool) -> set[TopicPartition]:
        # KIP-447: a consumer asking for stable offsets must wait out offsets of an open transaction.
        return ctx.broker.transactions.pending_offsets(group_id) if require_stable and version >= 7 else set()

    def readable(wanted: list[TopicPartition] | None,
                 found: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the principal may see of a group's offsets: those of topics it may describe; a partition
        asked for in one it may not is answered TOPIC_AUTHORIZATION_FAILED (``denied``)."""
        if ctx.broker.acls is None:
            return found
        visible = {tp: om for tp, om in found.items()
                   if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, tp[0])}
        for tp in wanted or []:
            if tp not in visible:
                denied.add(tp)
                visible[tp] = OffsetAndMetadata(-1)
        return visible

    denied: set[TopicPartition] = set()

    def partition_error(tp: TopicPartition, pending: set[TopicPartition], error: ErrorCode = ErrorCode.NONE) -> int:
        if tp in denied:
            return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return int(ErrorCode.UNSTABLE_OFFSET_COMMIT) if tp in pending else int(error)

    def group_error(group_id: str) -> ErrorCode | None:
        if ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return None
        return ErrorCode.GROUP_AUTHORIZATION_FAILED

    def fetch(coordinator: GroupCoordinator) -> OffsetFetchResponse:
        if version >= 8:
            # Member id and epoch (v9) only matter to the KIP-848 consumer protocol; classic
            # groups do not validate them.
            groups = []
            for g in request.groups:
                wanted = None if g.topics is None else [(t.name, p) for t in g.topics for p in t.partition_indexes]
                refused = group_error(g.group_id)
                if refused is not None:
                    groups.append(cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=refused, topics=[]))
                    continue
                error, found = coordinator.offsets.fetch_offsets(g.group_id, wanted, g.member_id if version >= 9 else None,
                                                         g.member_epoch if version >= 9 else -1)
                found = readable(wanted, found)
                pending = unstable(g.group_id, request.require_stable)
                groups.append(cls.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=int(error),
                    topics=[] if error is not ErrorCode.NONE else [
                        cls.OffsetFetchResponseTopics(name=topic, partitions=[
                            cls.OffsetFetchResponsePartitions(
                                partition_index=p, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                                metadata=om.metadata, error_code=partition_error((topic, p), pending))
                            for p, om in parts])
                        for topic, parts in _by_topic(found.items()).items()]))
            return cls(throttle_time_ms=0, groups=groups)
        wanted = None if request.topics is None else [(t.name, p) for t in request.topics
                                                      for p in t.partition_indexes]
        refused = group_error(request.group_id)
        if refused is not None:
            error, found = refused, {}
        else:
            error, found = coordinator.offsets.fetch_offsets(request.group_id, wanted)
            found = readable(wanted, found)
        pending = unstable(request.group_id, request.require_stable)
        if error is not ErrorCode.NONE:
            if version >= 2:
                return cls(throttle_time_ms=0, error_code=int(error), topics=[])
            # v0-v1 have no top-level error: every requested partition carries it.
            found = {tp: OffsetAndMetadata(-1) for tp in wanted or []}
        return cls(throttle_time_ms=0, error_code=0, topics=[
            cls.OffsetFetchResponseTopic(name=topic, partitions=[
                cls.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=om.offset,
                    committed_leader_epoch=om.leader_epoch if version >= 5 else -1,
                    metadata=om.metadata, error_code=partition_error((topic, p), pending, error))
                for p, om in parts])
            for topic, parts in _by_topic(found.items()).items()])

    return get_coordinator(ctx.broker).call(fetch)


@api(OffsetDeleteRequest, 0, 0)
def handle_offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> Deferred[OffsetDeleteResponse]:
    cls = OffsetDeleteResponse
    requested: list[TopicPartition] = []
    errors: dict[TopicPartition, ErrorCode] = {}
    if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return succeed(cls(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[]))
    for topic in request.topics:
        topic_denied = not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            requested.append(tp)
            if topic_denied:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not _partition_exists(ctx.broker, topic.name, p.partition_index):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    eligible = [tp for tp in requested if tp not in errors]

    def respond(outcome: tuple[ErrorCode, dict[TopicPartition, ErrorCode]]) -> OffsetDeleteResponse:
        group_error, partition_errors = outcome
        if group_error is not ErrorCode.NONE:
            return cls(error_code=int(group_error), throttle_time_ms=0, topics=[])
        errors.update(partition_errors)
        return cls(error_code=0, throttle_time_ms=0, topics=[
            cls.OffsetDeleteResponseTopic(name=topic, partitions=[
                cls.OffsetDeleteResponsePartition(partition_index=p, error_code=int(e)) for p, e in parts])
            for topic, parts in _by_topic((tp, errors[tp]) for tp in requested).items()])

    def delete(coordinator: GroupCoordinator) -> Deferred[OffsetDeleteResponse]:
        return coordinator.offsets.delete_offsets(request.group_id, eligible).addCallback(respond)

    return get_coordinator(ctx.broker).call(delete)

