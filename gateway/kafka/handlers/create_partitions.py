"""CreatePartitions (key 37): grow a topic. New partitions split existing key-space slices and no data
moves (see streams.topics); the stream keeps its segments until it scales."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.cluster import NOT_CONTROLLER_MESSAGE, not_controller
from millrace.gateway.kafka.handlers.create_topics import replica_assignment_error
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
)
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.topics import TopicError, TopicRegistry, legal_topic_name

log = logging.getLogger(__name__)

CREATE_PARTITIONS = CreatePartitionsRequest.API_KEY
_R = CreatePartitionsResponse


@dataclass
class _Job:
    name: str
    count: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _check(ctx: RequestContext, t: CreatePartitionsRequest.CreatePartitionsTopic) -> _Job:
    job = _Job(t.name, t.count)
    if not_controller(ctx.broker.cluster):
        job.error, job.message = ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE
        return job
    if not legal_topic_name(t.name):
        job.error, job.message = ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {t.name!r}"
        return job
    if not ctx.authorized(AclOperation.ALTER, ResourceType.TOPIC, t.name):
        job.error, job.message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
        return job
    topic = ctx.broker.topics.get(t.name)
    if topic is None:
        job.error, job.message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} does not exist"
        return job
    current = topic.partition_count
    if t.count <= current:
        job.error = ErrorCode.INVALID_PARTITIONS
        job.message = (f"topic already has {current} partition(s)" if t.count == current else
                       f"topic currently has {current} partition(s), which is higher than the requested {t.count}")
        return job
    if t.assignments is not None:
        added = t.count - current
        if len(t.assignments) != added:
            job.error = ErrorCode.INVALID_REPLICA_ASSIGNMENT
            job.message = (f"attempted to add {added} additional partition(s), but only "
                           f"{len(t.assignments)} assignment(s) were specified")
            return job
        for a in t.assignments:
            problem = replica_assignment_error(ctx.broker.config.node_id, list(a.broker_ids))
            if problem:
                job.error, job.message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
                return job
    return job


def _grow_all(registry: TopicRegistry, jobs: list[_Job], validate_only: bool) -> None:
    """Blocking: grow every topic that passed the checks (the registry re-checks under its lock)."""
    for job in jobs:
        if job.error:
            continue
        try:
            registry.add_partitions(job.name, job.count, validate_only)
        except TopicError as exc:
            job.error, job.message = error_code(exc), str(exc)
        except Exception as exc:  # noqa: BLE001 - one topic's failure must not fail the others
            log.exception("adding partitions to topic %r failed", job.name)
            job.error, job.message = ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)


@api(CreatePartitionsRequest, 0, 3)
def handle_create_partitions(ctx: RequestContext,
                             request: CreatePartitionsRequest) -> CreatePartitionsResponse | Deferred[CreatePartitionsResponse]:
    counts = Counter(t.name for t in request.topics)
    jobs: list[_Job] = []
    reported: set[str] = set()
    for t in request.topics:
        if counts[t.name] > 1:
            if t.name not in reported:
                reported.add(t.name)
                jobs.append(_Job(t.name, t.count, ErrorCode.INVALID_REQUEST, "duplicate topic name"))
            continue
        jobs.append(_check(ctx, t))

    def respond(_: object = None) -> CreatePartitionsResponse:
        return _R(throttle_time_ms=0, results=[
            _R.CreatePartitionsTopicResult(name=j.name, error_code=int(j.error), error_message=j.message)
            for j in jobs
        ])

    if all(j.error for j in jobs):
        return respond()
    return ctx.broker.blocking(_grow_all, ctx.broker.topics, jobs, request.validate_only).addCallback(respond)
