"""What every group request is checked against before its group is looked at (Kafka's
GroupCoordinatorService checks), and what a failed write of group state answers.

``GroupApi`` names the asking API because Kafka accepts the empty group id from some of them only.
"""

from __future__ import annotations

from enum import Enum

from twisted.python.failure import Failure

from millrace.gateway.kafka_protocol.errors import ErrorCode


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


def store_failure_code(failure: Failure) -> ErrorCode:
    """Kafka's mapping of a failed group-metadata append to the error clients see."""
    if failure.check(ValueError):  # a key or record beyond the table limits
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
