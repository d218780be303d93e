"""DeleteTopics (key 20): by name, and from v6 by topic id. The topic's stream is sealed and deleted,
so its segments (and their data in every tier) go away."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.cluster import NOT_CONTROLLER_MESSAGE, not_controller
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka.stream_errors import error_code
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from millrace.gateway.security.acls import AclOperation, ResourceType
from millrace.streams.topics import TopicError, TopicRegistry, legal_topic_name

log = logging.getLogger(__name__)

DELETE_TOPICS = DeleteTopicsRequest.API_KEY
ZERO_UUID = uuid.UUID(int=0)
_R = DeleteTopicsResponse


@dataclass
class _Job:
    name: str | None
    topic_id: uuid.UUID = ZERO_UUID
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _may(ctx: RequestContext, operation: AclOperation, name: str) -> bool:
    """Whether the principal may ``operation`` the topic: DELETE on the cluster allows every topic
    operation DeleteTopics checks (Kafka's ControllerApis ``hasClusterAuth``)."""
    return (ctx.authorized(operation, ResourceType.TOPIC, name)
            or ctx.authorized(AclOperation.DELETE, ResourceType.CLUSTER))


def _resolve(ctx: RequestContext, name: str | None, topic_id: uuid.UUID) -> _Job:
    """Check a deletion on the reactor (in memory) and fill in whichever of name and id is missing."""
    registry = ctx.broker.topics
    if not_controller(ctx.broker.cluster):
        return _Job(name, topic_id, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
    if name is not None and topic_id != ZERO_UUID:
        return _Job(name, topic_id, ErrorCode.INVALID_REQUEST, "you may not specify both topic name and topic id")
    if topic_id != ZERO_UUID:
        topic = registry.by_id(topic_id)
        if topic is None:
            return _Job(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
        if not _may(ctx, AclOperation.DELETE, topic.name):
            # Kafka names the topic only to a principal that may describe it (the id is not a secret).
            describable = _may(ctx, AclOperation.DESCRIBE, topic.name)
            return _Job(topic.name if describable else None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "Topic authorization failed.")
        return _Job(topic.name, topic_id)
    if name is None:
        return _Job(None, ZERO_UUID, ErrorCode.INVALID_REQUEST, "neither topic name nor id were specified")
    # As Kafka's controller decides: a topic the principal may not describe is refused whether it exists
    # or not (its existence is not told); one it may describe but that does not exist is unknown; one
    # that exists needs DELETE.
    if not _may(ctx, AclOperation.DESCRIBE, name):
        return _Job(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    topic = registry.get(name)
    if topic is None:
        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if legal_topic_name(name) else ErrorCode.INVALID_TOPIC_EXCEPTION
        return _Job(name, ZERO_UUID, error, f"topic {name!r} does not exist")
    if not _may(ctx, AclOperation.DELETE, name):
        return _Job(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    return _Job(name, topic.topic_id)


def _delete_all(registry: TopicRegistry, jobs: list[_Job]) -> None:
    """Blocking: delete every topic that resolved."""
    for job in jobs:
        if job.error:
            continue
        assert job.name is not None, "a job without an error has resolved its topic's name"
        try:
            registry.delete(job.name)
        except TopicError as exc:  # deleted meanwhile by another request
            job.error, job.message = error_code(exc), str(exc)
        except Exception as exc:  # noqa: BLE001 - one topic's failure must not fail the others
            log.exception("deleting topic %r failed", job.name)
            job.error, job.message = ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)


@api(DeleteTopicsRequest, 0, 6)
def handle_delete_topics(ctx: RequestContext,
                         request: DeleteTopicsRequest) -> DeleteTopicsResponse | Deferred[DeleteTopicsResponse]:
    version = ctx.api_version
    wanted = ([(t.name, t.topic_id) for t in request.topics] if version >= 6
              else [(name, ZERO_UUID) for name in request.topic_names])
    counts = Counter(wanted)
    jobs: list[_Job] = []
    seen: set[tuple[str | None, uuid.UUID]] = set()
    for name, topic_id in wanted:
        if (name, topic_id) in seen:
            continue
        seen.add((name, topic_id))
        if counts[(name, topic_id)] > 1:
            what = "name" if topic_id == ZERO_UUID else "id"
            jobs.append(_Job(name, topic_id, ErrorCode.INVALID_REQUEST, f"duplicate topic {what}"))
        else:
            jobs.append(_resolve(ctx, name, topic_id))
    # The same topic named once by name and once by id would otherwise be deleted twice.
    by_topic = Counter(j.name for j in jobs if not j.error)
    for j in jobs:
        if not j.error and by_topic[j.name] > 1:
            j.error, j.message = ErrorCode.INVALID_REQUEST, "the topic is named more than once"

    def respond(_: object = None) -> DeleteTopicsResponse:
        return _R(throttle_time_ms=0, responses=[
            _R.DeletableTopicResult(
                # Before v6 every result carries a name; from v6 an unknown id has none.
                name=j.name if j.name is not None or version >= 6 else "",
                topic_id=j.topic_id, error_code=int(j.error), error_message=j.message)
            for j in jobs
        ])

    if all(j.error for j in jobs):
        return respond()
    return ctx.broker.blocking(_delete_all, ctx.broker.topics, jobs).addCallback(respond)
