"""What every group request is checked against before its group is looked at (Kafka's
GroupCoordinatorService checks), and what a failed write of group state answers.

``GroupApi`` names the asking API because Kafka accepts the empty group id from some of them only.
``STORE_FAILURE_CODES`` is the one table from a write's failure to the error clients see, for the
classic and the consumer group protocol alike.
"""

from __future__ import annotations

import logging
from enum import Enum

from twisted.internet import defer
from twisted.python.failure import Failure

from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.protocol.errors import ConnectionLostError, RetriableError, WrongHostError
from millrace.store.errors import ContainerOfflineError, DataLogWriterFencedError

log = logging.getLogger(__name__)


class GroupApi(Enum):
    """Which API asks; decides whether an empty group id is acceptable."""

    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"
    OFFSET_COMMIT = "offset_commit"
    OFFSET_FETCH = "offset_fetch"
    OFFSET_DELETE = "offset_delete"
    DESCRIBE = "describe"
    DELETE = "delete"


# For backwards compatibility Kafka accepts the empty group id for these (offset storage of
# ungrouped consumers, and so that such a "group" can be described and deleted).
EMPTY_ID_OK = {GroupApi.OFFSET_COMMIT, GroupApi.OFFSET_FETCH, GroupApi.DESCRIBE, GroupApi.DELETE}


# Why a write of group state failed -> what the request answers, first match wins: Kafka's
# CoordinatorOperationExceptionHelper.handleOperationException, with the store's failures in place of the
# log append's. A failure whose outcome is unknown gets COORDINATOR_NOT_AVAILABLE, as Kafka answers a
# timed-out append (REQUEST_TIMED_OUT itself would be fatal to a JoinGroup or SyncGroup of Java clients):
# every client rediscovers the coordinator and retries.
STORE_FAILURE_CODES: tuple[tuple[tuple[type[BaseException], ...], ErrorCode], ...] = (
    # This node no longer serves the groups' table (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR).
    ((WrongHostError, DataLogWriterFencedError), ErrorCode.NOT_COORDINATOR),
    # The table's container is not running, or has no owner within the routing bound
    # (NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC_OR_PARTITION).
    ((ContainerOfflineError, RetriableError), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    # No answer in time, or the connection to the owner lost with the write outstanding (REQUEST_TIMED_OUT).
    ((TimeoutError, defer.TimeoutError, ConnectionLostError), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    # Local storage failed under the table (KAFKA_STORAGE_ERROR): another node may take the container.
    ((OSError,), ErrorCode.NOT_COORDINATOR),
    # A key or record beyond the table's limits (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE).
    ((ValueError,), ErrorCode.UNKNOWN_SERVER_ERROR),
)


def store_failure_code(failure: Failure, coordinator_status: ErrorCode | None = None) -> ErrorCode:
    """The error a request answers when its write of group state failed. ``coordinator_status``, the
    coordinator's status after the failure, comes first: a write failing because the coordinator moved
    (NOT_COORDINATOR) or restarted its load (COORDINATOR_LOAD_IN_PROGRESS) answers that. Anything the
    table does not name is unexpected: UNKNOWN_SERVER_ERROR, logged with its traceback."""
    if coordinator_status is not None:
        return coordinator_status
    for kinds, code in STORE_FAILURE_CODES:
        if failure.check(*kinds) is not None:
            return code
    log.error("unexpected failure writing group state: %s", failure.getTraceback())
    return ErrorCode.UNKNOWN_SERVER_ERROR
