"""Committed offsets of every group, as Kafka's OffsetMetadataManager keeps them: OffsetCommit,
TxnOffsetCommit (checked here, applied when its transaction commits), OffsetFetch, OffsetDelete, the
removal of a deleted topic's offsets, and expiry past ``offsets.retention.minutes``.

The offsets live on each group (``Group.offsets``); classic and consumer-protocol groups alike, with
the member checks of a consumer-protocol group supplied by ``consumer_groups``. A commit is answered
once durable; one in flight is counted in ``Group.pending_commits`` so that neither expiry nor a
deletion drops it from under the write.

Threading: reactor thread only.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from millrace.gateway.kafka.classic_groups.group import Group, GroupState, TopicPartition, cancel_timer
from millrace.gateway.kafka.group_status import GroupApi
from millrace.gateway.kafka.group_store import OffsetAndMetadata
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.streams.futures import on_reactor

if TYPE_CHECKING:
    from millrace.gateway.kafka.group_views import GroupHub

log = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms


class OffsetManager:
    """Every group's committed offsets; the groups are the coordinator's (``GroupCoordinator.groups``)."""

    def __init__(self, coordinator: GroupHub, retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                 retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS) -> None:
        self.coordinator = coordinator
        self.retention_ms = retention_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self._cleanup_timer: IDelayedCall | None = None

    def start_expiry(self) -> None:
        """Check for expired offsets every ``retention_check_interval_ms`` from now on."""
        self._cleanup_timer = self.coordinator.later(self.retention_check_interval_ms / 1000, self._periodic_cleanup)

    def stop_expiry(self) -> None:
        cancel_timer(self._cleanup_timer)

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata], api_version: int) -> Deferred:
        """Fires with {(topic, partition): ErrorCode} once the accepted offsets are durable."""
        error = self.coordinator.validate_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        group = self.coordinator.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Only ungrouped (simple) consumers may create a group by committing; since v9
                # the answer says so plainly.
                error = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                return succeed(dict.fromkeys(offsets, error))
            group = self.coordinator.groups[group_id] = Group(group_id)
        if group.consumer is not None:
            # Checked per partition: a commit at an older member epoch is fine for partitions held since.
            refused = self.coordinator.consumer.validate_commit(group.consumer, member_id, generation_id, api_version, offsets)
            accepted = {tp: om for tp, om in offsets.items() if tp not in refused}
            if not accepted:
                return succeed(refused)
            return self._store_offsets(group, accepted).addCallback(lambda result: {**result, **refused})
        error = group.validate_offset_commit(member_id, instance_id, generation_id, transactional=False)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        member = group.members.get(member_id)
        if member is not None and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit shows the member is alive (it keeps committing during a rebalance, and
            # learns of the rebalance from its heartbeats).
            self.coordinator.membership.schedule_heartbeat(group, member)
        return self._store_offsets(group, offsets)

    def validate_transactional_commit(self, group_id: str, member_id: str, instance_id: str | None,
                                      generation_id: int) -> ErrorCode | None:
        """TxnOffsetCommit's group checks (KIP-447): a member id and generation, when given, must be the
        group's current ones, so a zombie of an older generation cannot commit in a transaction."""
        error = self.coordinator.validate_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return error
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return ErrorCode.ILLEGAL_GENERATION if generation_id >= 0 else None
        if group.consumer is not None:
            return self.coordinator.consumer.validate_member_epoch(group.consumer, member_id, generation_id)
        return group.validate_offset_commit(member_id, instance_id, generation_id, transactional=True)

    def commit_transactional_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
                                     ) -> Deferred:
        """A committed transaction's offsets of ``group_id``: fires with {tp: ErrorCode} once durable."""
        error = self.coordinator.validate_status(group_id, GroupApi.OFFSET_COMMIT)
        if error is not None:
            return succeed(dict.fromkeys(offsets, error))
        group = self.coordinator.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            group = self.coordinator.groups[group_id] = Group(group_id)
        return self._store_offsets(group, offsets)

    def _store_offsets(self, group: Group, offsets: dict[TopicPartition, OffsetAndMetadata]) -> Deferred:
        result: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            if len(om.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = om
        if not accepted:
            return succeed(result)
        group.pending_commits.update(list(accepted))

        def settle() -> None:
            group.pending_commits.subtract(list(accepted))
            group.pending_commits += collections.Counter()  # drop zero counts

        def stored(_: Any) -> dict[TopicPartition, ErrorCode]:
            # An offset deleted while its commit was in flight stays deleted (the removal was
            # written after the commit).
            live = {tp: om for tp, om in accepted.items() if group.pending_commits[tp] > 0}
            settle()
            if not group.is_(GroupState.DEAD):
                group.offsets.update(live)
            result.update(dict.fromkeys(accepted, ErrorCode.NONE))
            return result

        def failed(failure: Failure) -> dict[TopicPartition, ErrorCode]:
            settle()
            log.warning("cannot persist offsets of group %s: %s", group.group_id, failure.getErrorMessage())
            # Too large for the table: Kafka's answer to a commit beyond its log's limits.
            error = ErrorCode.INVALID_COMMIT_OFFSET_SIZE if failure.check(ValueError) else \
                self.coordinator.failure_code(failure)
            result.update(dict.fromkeys(accepted, error))
            return result

        return self.coordinator.store.store_offsets(group.group_id, accepted).addCallbacks(stored, failed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets, whatever the group's state (simple consumers have no membership).
        ``partitions`` None: all of the group's. Unknown partitions answer offset -1. A member id and
        epoch (OffsetFetch v9) are checked against a consumer-protocol group's member."""
        error = self.coordinator.validate_status(group_id, GroupApi.OFFSET_FETCH)
        if error is not None:
            return error, {}
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.consumer is not None:
            error = self.coordinator.consumer.validate_fetch(group.consumer, member_id, member_epoch)
            if error is not None:
                return error, {}
        known = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
        if partitions is None:
            return ErrorCode.NONE, dict(known)
        return ErrorCode.NONE, {tp: known.get(tp) or OffsetAndMetadata(-1) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> Deferred:
        """OffsetDelete: fires with (group error, {tp: error}) once the removal is durable."""
        error = self.coordinator.validate_status(group_id, GroupApi.OFFSET_DELETE)
        if error is not None:
            return succeed((error, {}))
        group = self.coordinator.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return succeed((ErrorCode.GROUP_ID_NOT_FOUND, {}))
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.consumer is not None and group.consumer.members:
            subscribed = self.coordinator.consumer.subscribed_topics(group.consumer)
            eligible = [tp for tp in partitions if tp[0] not in subscribed]
            errors.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp not in eligible})
        elif group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group():
            eligible = [tp for tp in partitions if not group.is_subscribed_to(tp[0])]
            errors.update({tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp not in eligible})
        else:
            return succeed((ErrorCode.NON_EMPTY_GROUP, {}))
        if not eligible:
            return succeed((ErrorCode.NONE, errors))
        d = self._remove_offsets(group, eligible)
        return d.addCallback(lambda _: (ErrorCode.NONE, {**errors, **dict.fromkeys(eligible, ErrorCode.NONE)}))

    def _remove_offsets(self, group: Group, partitions: Iterable[TopicPartition]) -> Deferred:
        """Drop offsets (and the group once it is empty with none left); fires when durable.
        Kafka's cleanupGroupMetadata."""
        removed = [tp for tp in partitions if group.offsets.pop(tp, None) is not None or tp in group.pending_commits]
        for tp in removed:
            group.pending_commits.pop(tp, None)
        if group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_commits and (
                group.consumer is None or not group.consumer.members):
            log.info("group %s transitions to Dead in generation %d", group.group_id, group.generation_id)
            self.coordinator.make_dead(group)
            return self.coordinator.store.remove_group(group.group_id, removed)
        return self.coordinator.store.remove_offsets(group.group_id, removed)

    def on_topic_event(self, event: str, topic: Any) -> None:
        """TopicRegistry listener (called on a worker thread): hop to the reactor."""
        if event == "deleted":
            on_reactor(self._topic_deleted, topic.name)

    def _topic_deleted(self, topic: str) -> None:
        if not self.coordinator.loaded:
            # Loading reads what is durable; catch the deleted topic once it is done.
            self.coordinator.when_ready().addCallback(lambda _: self._topic_deleted(topic))
            return
        for group in list(self.coordinator.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if gone:
                self._remove_offsets(group, gone).addErrback(
                    lambda f, g: log.warning("cannot remove offsets of deleted topic %s in group %s: %s",
                                             topic, g, f.getErrorMessage()), group.group_id)

    def _periodic_cleanup(self) -> None:
        self.start_expiry()
        self.expire_offsets()

    def expire_offsets(self) -> int:
        """Drop offsets past retention (Kafka's rules: an empty group's once it has been empty for
        the retention period; a stable consumer group's for topics it no longer subscribes to; a
        simple group's by commit time; v2-v4 commits by their own expiry). Returns how many."""
        now = self.coordinator.now_ms()
        count = 0
        for group in list(self.coordinator.groups.values()):
            keep: set[str] = set()
            since_empty: int | None = None
            if group.consumer is not None:
                # Kafka's rule for consumer groups: by commit time for topics no member subscribes to,
                # all of them from when the group became empty.
                if group.consumer.members:
                    keep = self.coordinator.consumer.subscribed_topics(group.consumer)
                else:
                    since_empty = group.consumer.empty_since
            elif group.is_(GroupState.EMPTY):
                # A group that had members counts from when it became empty.
                since_empty = group.state_timestamp if group.protocol_type is not None else None
            elif group.is_consumer_group() and group.subscribed_topics is not None and group.is_(GroupState.STABLE):
                keep = group.subscribed_topics
            else:
                continue
            expired = []
            for tp, om in group.offsets.items():
                if tp[0] in keep or tp in group.pending_commits:
                    continue
                if om.expire_timestamp is not None:
                    due = now >= om.expire_timestamp
                else:
                    base = since_empty if since_empty is not None else om.commit_timestamp
                    due = now - base >= self.retention_ms
                if due:
                    expired.append(tp)
            if expired or (group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_commits):
                count += len(expired)
                self._remove_offsets(group, expired).addErrback(
                    lambda f, g: log.warning("cannot expire offsets of group %s: %s", g, f.getErrorMessage()),
                    group.group_id)
        return count

    def drop_offsets_of_missing_topics(self) -> None:
        """Offsets of topics deleted while the coordinator was not listening (a crash between the
        topic's deletion and its offsets' removal, or before the coordinator was created)."""
        topics = self.coordinator.topics
        if topics is None:
            return
        for topic in {tp[0] for group in self.coordinator.groups.values() for tp in group.offsets}:
            if topics.get(topic) is None:
                self._topic_deleted(topic)
