"""Kafka protocol error codes (Kafka 4.0: -1..127) with their retriable flag.

The protocol guide's error table is generated from Kafka's ``org.apache.kafka.common.protocol.Errors``
and is not part of our copy of protocol.html, so this static table carries Kafka's names, codes and
retriable flags (cross-checked against kafka-python's table); the tests check it is dense and unique.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

__all__ = ["ErrorCode", "is_retriable"]


class ErrorCode(IntEnum):
    """A Kafka error code; ``.retriable`` and ``.description`` come from Kafka's Errors table."""

    retriable: bool
    description: str

    if not TYPE_CHECKING:
        # Hidden from type checkers, which would otherwise take this for the signature of the lookup
        # ``ErrorCode(code)``; it only builds the members from their (code, retriable, description).
        def __new__(cls, code: int, retriable: bool, description: str) -> ErrorCode:
            obj = int.__new__(cls, code)
            obj._value_ = code
            obj.retriable = retriable
            obj.description = description
            return obj

    UNKNOWN_SERVER_ERROR = (-1, False, 'The server experienced an unexpected error when processing the request.')
    NONE = (0, False, 'No error.')
    OFFSET_OUT_OF_RANGE = (1, False, 'The requested offset is outside the range of offsets maintained by the server for the given topic/partition.')
    CORRUPT_MESSAGE = (2, True, 'This message has failed its CRC checksum, exceeds the valid size, or is otherwise corrupt.')
    UNKNOWN_TOPIC_OR_PARTITION = (3, True, 'This request is for a topic or partition that does not exist on this broker.')
    INVALID_FETCH_SIZE = (4, False, 'The message has a negative size.')
    LEADER_NOT_AVAILABLE = (5, True, 'This error is thrown if we are in the middle of a leadership election and there is currently no leader for this partition and hence it is unavailable for writes.')
    NOT_LEADER_OR_FOLLOWER = (6, True, 'This error is thrown if the client attempts to send messages to a replica that is not the leader for some partition. It indicates that the clients metadata is out of date.')
    REQUEST_TIMED_OUT = (7, True, 'This error is thrown if the request exceeds the user-specified time limit in the request.')
    BROKER_NOT_AVAILABLE = (8, False, 'This is not a client facing error and is used mostly by tools when a broker is not alive.')
    REPLICA_NOT_AVAILABLE = (9, True, 'If replica is expected on a broker, but is not (this can be safely ignored).')
    MESSAGE_TOO_LARGE = (10, False, 'The server has a configurable maximum message size to avoid unbounded memory allocation. This error is thrown if the client attempt to produce a message larger than this maximum.')
    STALE_CONTROLLER_EPOCH = (11, False, 'Internal error code for broker-to-broker communication.')
    OFFSET_METADATA_TOO_LARGE = (12, False, 'If you specify a string larger than configured maximum for offset metadata.')
    NETWORK_EXCEPTION = (13, True, '')
    COORDINATOR_LOAD_IN_PROGRESS = (14, True, 'The broker returns this error code for txn or group requests, when the coordinator is loading and hence cant process requests')
    COORDINATOR_NOT_AVAILABLE = (15, True, 'The broker returns this error code for consumer and transaction requests if the offsets topic has not yet been created, or if the group/txn coordinator is not active.')
    NOT_COORDINATOR = (16, True, 'The broker returns this error code if it is not the correct coordinator for the specified consumer or transaction group')
    INVALID_TOPIC_EXCEPTION = (17, False, 'For a request which attempts to access an invalid topic (e.g. one which has an illegal name), or if an attempt is made to write to an internal topic (such as the consumer offsets topic).')
    RECORD_LIST_TOO_LARGE = (18, False, 'If a message batch in a produce request exceeds the maximum configured segment size.')
    NOT_ENOUGH_REPLICAS = (19, True, 'Returned from a produce request when the number of in-sync replicas is lower than the configured minimum and requiredAcks is -1.')
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, True, 'Returned from a produce request when the message was written to the log, but with fewer in-sync replicas than required.')
    INVALID_REQUIRED_ACKS = (21, False, 'Returned from a produce request if the requested requiredAcks is invalid (anything other than -1, 1, or 0).')
    ILLEGAL_GENERATION = (22, False, 'Returned from group membership requests (such as heartbeats) when the generation id provided in the request is not the current generation.')
    INCONSISTENT_GROUP_PROTOCOL = (23, False, 'Returned in join group when the member provides a protocol type or set of protocols which is not compatible with the current group.')
    INVALID_GROUP_ID = (24, False, 'Returned in join group when the groupId is empty or null.')
    UNKNOWN_MEMBER_ID = (25, False, 'Returned from group requests (offset commits/fetches, heartbeats, etc) when the memberId is not in the current generation.')
    INVALID_SESSION_TIMEOUT = (26, False, 'Return in join group when the requested session timeout is outside of the allowed range on the broker')
    REBALANCE_IN_PROGRESS = (27, False, 'Returned in heartbeat requests when the coordinator has begun rebalancing the group. This indicates to the client that it should rejoin the group.')
    INVALID_COMMIT_OFFSET_SIZE = (28, False, 'This error indicates that an offset commit was rejected because of oversize metadata.')
    TOPIC_AUTHORIZATION_FAILED = (29, False, 'Returned by the broker when the client is not authorized to access the requested topic.')
    GROUP_AUTHORIZATION_FAILED = (30, False, 'Returned by the broker when the client is not authorized to access a particular groupId.')
    CLUSTER_AUTHORIZATION_FAILED = (31, False, 'Returned by the broker when the client is not authorized to use an inter-broker or administrative API.')
    INVALID_TIMESTAMP = (32, False, 'The timestamp of the message is out of acceptable range.')
    UNSUPPORTED_SASL_MECHANISM = (33, False, 'The broker does not support the requested SASL mechanism.')
    ILLEGAL_SASL_STATE = (34, False, 'Request is not valid given the current SASL state.')
    UNSUPPORTED_VERSION = (35, False, 'The version of API is not supported.')
    TOPIC_ALREADY_EXISTS = (36, False, 'Topic with this name already exists.')
    INVALID_PARTITIONS = (37, False, 'Number of partitions is invalid.')
    INVALID_REPLICATION_FACTOR = (38, False, 'Replication-factor is invalid.')
    INVALID_REPLICA_ASSIGNMENT = (39, False, 'Replication assignment is invalid.')
    INVALID_CONFIG = (40, False, 'Configuration is invalid.')
    NOT_CONTROLLER = (41, True, 'This is not the correct controller for this cluster.')
    INVALID_REQUEST = (42, False, 'This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.')
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, False, 'The message format version on the broker does not support this request.')
    POLICY_VIOLATION = (44, False, 'Request parameters do not satisfy the configured policy.')
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False, 'The broker received an out of order sequence number.')
    DUPLICATE_SEQUENCE_NUMBER = (46, False, 'The broker received a duplicate sequence number.')
    INVALID_PRODUCER_EPOCH = (47, False, 'Producer attempted to produce with an old epoch.')
    INVALID_TXN_STATE = (48, False, 'The producer attempted a transactional operation in an invalid state.')
    INVALID_PRODUCER_ID_MAPPING = (49, False, 'The producer attempted to use a producer id which is not currently assigned to its transactional id.')
    INVALID_TRANSACTION_TIMEOUT = (50, False, 'The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).')
    CONCURRENT_TRANSACTIONS = (51, True, 'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.')
    TRANSACTION_COORDINATOR_FENCED = (52, False, 'Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.')
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, False, 'Transactional Id authorization failed.')
    SECURITY_DISABLED = (54, False, 'Security features are disabled.')
    OPERATION_NOT_ATTEMPTED = (55, False, 'The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest.')
    KAFKA_STORAGE_ERROR = (56, True, 'Disk error when trying to access log file on the disk.')
    LOG_DIR_NOT_FOUND = (57, False, 'The user-specified log directory is not found in the broker config.')
    SASL_AUTHENTICATION_FAILED = (58, False, 'SASL Authentication failed.')
    UNKNOWN_PRODUCER_ID = (59, False, "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question. This could happen if, for instance, the producer's records were deleted because their retention time had elapsed. Once the last records of the producerId are removed, the producer's metadata is removed from the broker, and future appends by the producer will return this exception.")
    REASSIGNMENT_IN_PROGRESS = (60, False, 'A partition reassignment is in progress.')
    DELEGATION_TOKEN_AUTH_DISABLED = (61, False, 'Delegation Token feature is not enabled.')
    DELEGATION_TOKEN_NOT_FOUND = (62, False, 'Delegation Token is not found on server.')
    DELEGATION_TOKEN_OWNER_MISMATCH = (63, False, 'Specified Principal is not valid Owner/Renewer.')
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = (64, False, 'Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.')
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = (65, False, 'Delegation Token authorization failed.')
    DELEGATION_TOKEN_EXPIRED = (66, False, 'Delegation Token is expired.')
    INVALID_PRINCIPAL_TYPE = (67, False, 'Supplied principalType is not supported.')
    NON_EMPTY_GROUP = (68, False, 'The group is not empty.')
    GROUP_ID_NOT_FOUND = (69, False, 'The group id does not exist.')
    FETCH_SESSION_ID_NOT_FOUND = (70, True, 'The fetch session ID was not found.')
    INVALID_FETCH_SESSION_EPOCH = (71, True, 'The fetch session epoch is invalid.')
    LISTENER_NOT_FOUND = (72, True, 'There is no listener on the leader broker that matches the listener on which metadata request was processed.')
    TOPIC_DELETION_DISABLED = (73, False, 'Topic deletion is disabled.')
    FENCED_LEADER_EPOCH = (74, True, 'The leader epoch in the request is older than the epoch on the broker.')
    UNKNOWN_LEADER_EPOCH = (75, True, 'The leader epoch in the request is newer than the epoch on the broker.')
    UNSUPPORTED_COMPRESSION_TYPE = (76, False, 'The requesting client does not support the compression type of given partition.')
    STALE_BROKER_EPOCH = (77, False, 'Broker epoch has changed.')
    OFFSET_NOT_AVAILABLE = (78, True, 'The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.')
    MEMBER_ID_REQUIRED = (79, False, 'The group member needs to have a valid member id before actually entering a consumer group.')
    PREFERRED_LEADER_NOT_AVAILABLE = (80, True, 'The preferred leader was not available.')
    GROUP_MAX_SIZE_REACHED = (81, False, 'The consumer group has reached its max size.')
    FENCED_INSTANCE_ID = (82, False, 'The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.')
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (83, True, 'Eligible topic partition leaders are not available.')
    ELECTION_NOT_NEEDED = (84, True, 'Leader election not needed for topic partition.')
    NO_REASSIGNMENT_IN_PROGRESS = (85, False, 'No partition reassignment is in progress.')
    GROUP_SUBSCRIBED_TO_TOPIC = (86, False, 'Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.')
    INVALID_RECORD = (87, False, 'This record has failed the validation on broker and hence will be rejected.')
    UNSTABLE_OFFSET_COMMIT = (88, True, 'There are unstable offsets that need to be cleared.')
    THROTTLING_QUOTA_EXCEEDED = (89, True, 'The throttling quota has been exceeded.')
    PRODUCER_FENCED = (90, False, 'There is a newer producer with the same transactionalId which fences the current one.')
    RESOURCE_NOT_FOUND = (91, False, 'A request illegally referred to a resource that does not exist.')
    DUPLICATE_RESOURCE = (92, False, 'A request illegally referred to the same resource twice.')
    UNACCEPTABLE_CREDENTIAL = (93, False, 'Requested credential would not meet criteria for acceptability.')
    INCONSISTENT_VOTER_SET = (94, False, 'Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters.')
    INVALID_UPDATE_VERSION = (95, False, 'The given update version was invalid.')
    FEATURE_UPDATE_FAILED = (96, False, 'Unable to update finalized features due to an unexpected server error.')
    PRINCIPAL_DESERIALIZATION_FAILURE = (97, False, 'Request principal deserialization failed during forwarding. This indicates an internal error on the broker cluster security setup.')
    SNAPSHOT_NOT_FOUND = (98, False, 'Requested snapshot was not found.')
    POSITION_OUT_OF_RANGE = (99, False, 'Requested position is not greater than or equal to zero, and less than the size of the snapshot.')
    UNKNOWN_TOPIC_ID = (100, True, 'This server does not host this topic ID.')
    DUPLICATE_BROKER_REGISTRATION = (101, False, 'This broker ID is already in use.')
    BROKER_ID_NOT_REGISTERED = (102, False, 'The given broker ID was not registered.')
    INCONSISTENT_TOPIC_ID = (103, True, "The log's topic ID did not match the topic ID in the request.")
    INCONSISTENT_CLUSTER_ID = (104, False, 'The clusterId in the request does not match that found on the server.')
    TRANSACTIONAL_ID_NOT_FOUND = (105, False, 'The transactionalId could not be found.')
    FETCH_SESSION_TOPIC_ID_ERROR = (106, True, 'The fetch session encountered inconsistent topic ID usage.')
    INELIGIBLE_REPLICA = (107, False, 'The new ISR contains at least one ineligible replica.')
    NEW_LEADER_ELECTED = (108, False, 'The AlterPartition request successfully updated the partition state but the leader has changed.')
    OFFSET_MOVED_TO_TIERED_STORAGE = (109, False, 'The requested offset is moved to tiered storage.')
    FENCED_MEMBER_EPOCH = (110, False, 'The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.')
    UNRELEASED_INSTANCE_ID = (111, False, 'The instance ID is still used by another member in the consumer group. That member must leave first.')
    UNSUPPORTED_ASSIGNOR = (112, False, 'The assignor or its version range is not supported by the consumer group.')
    STALE_MEMBER_EPOCH = (113, False, 'The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.')
    MISMATCHED_ENDPOINT_TYPE = (114, False, 'The request was sent to an endpoint of the wrong type.')
    UNSUPPORTED_ENDPOINT_TYPE = (115, False, 'This endpoint type is not supported yet.')
    UNKNOWN_CONTROLLER_ID = (116, False, 'This controller ID is not known.')
    UNKNOWN_SUBSCRIPTION_ID = (117, False, 'Client sent a push telemetry request with an invalid or outdated subscription ID.')
    TELEMETRY_TOO_LARGE = (118, False, 'Client sent a push telemetry request larger than the maximum size the broker will accept.')
    INVALID_REGISTRATION = (119, False, 'The controller has considered the broker registration to be invalid.')
    TRANSACTION_ABORTABLE = (120, False, 'The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID.')
    INVALID_RECORD_STATE = (121, False, 'The record state is invalid. The acknowledgement of delivery could not be completed.')
    SHARE_SESSION_NOT_FOUND = (122, True, 'The share session was not found.')
    INVALID_SHARE_SESSION_EPOCH = (123, True, 'The share session epoch is invalid.')
    FENCED_STATE_EPOCH = (124, False, 'The share coordinator rejected the request because the share-group state epoch did not match.')
    INVALID_VOTER_KEY = (125, False, "The voter key doesn't match the receiving replica's key.")
    DUPLICATE_VOTER = (126, False, 'The voter is already part of the set of voters.')
    VOTER_NOT_FOUND = (127, False, 'The voter is not part of the set of voters.')


_RETRIABLE = frozenset(int(e) for e in ErrorCode if e.retriable)


def is_retriable(code: int) -> bool:
    """Whether a client may retry after this code (unknown codes are not retriable)."""
    return code in _RETRIABLE
