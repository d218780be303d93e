"""The coordinator's timed behaviour on a controlled clock: the initial rebalance delay, offset
retention, and sessions of members restored from the tables. The tables are real table segments on
a real store; only the clock is controlled."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import maybeDeferred
from twisted.internet.task import Clock

from millrace.gateway.kafka.broker import KafkaConfig
from millrace.gateway.kafka.classic_groups.group import GroupState, JoinResult
from millrace.gateway.kafka.group_coordinator import GroupCoordinator
from millrace.gateway.kafka.group_store import GROUPS_TABLE, OFFSETS_TABLE, GroupStore, OffsetAndMetadata
from millrace.gateway.kafka_protocol.errors import ErrorCode as E
from millrace.store.errors import ContainerOfflineError, DataCorruptionError, DataLogWriterFencedError
from millrace.store.tables import TableStore
from tests.storehelpers import open_store


@pytest.fixture
def tables(tmp_path):
    store = open_store(str(tmp_path))
    yield TableStore(store)
    store.close()


def table_len(tables: TableStore, name: str) -> int:
    return len(list(tables.entries(name)))


class Topics:
    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.listeners: list[Any] = []

    def get(self, name: str) -> Any:
        return name if name in self.names else None


def blocking(fn: Any, *args: Any) -> Any:
    return maybeDeferred(fn, *args)


def group_coordinator(tables: TableStore, config: KafkaConfig, topics: Topics | None = None,
                      **kwargs: Any) -> GroupCoordinator:
    """A coordinator over ``tables`` whose blocking calls run inline."""
    return GroupCoordinator(config, GroupStore(tables, blocking), topics or Topics("t", "u"), blocking,
                            **kwargs)


def coordinator(tables: TableStore, clock: Clock | None = None, **config: Any
                ) -> tuple[GroupCoordinator, Clock, TableStore]:
    clock = clock or Clock()
    config.setdefault("group_initial_rebalance_delay_ms", 0)  # tests that want Kafka's delay say so
    coord = group_coordinator(tables, KafkaConfig(**config), clock=clock, offsets_retention_ms=60_000,
                              retention_check_interval_ms=10_000)
    coord.load()
    return coord, clock, tables


def join(coord: GroupCoordinator, group: str, member_id: str = "", session: int = 10000,
         rebalance: int = 10000) -> Any:
    results: list[JoinResult] = []
    d = coord.membership.join_group(group, member_id, None, False, False, "client", "/127.0.0.1", rebalance, session,
                         "consumer", [("range", b"\x00\x00meta")])
    d.addCallback(results.append)
    return results


def test_initial_rebalance_delay_extends_while_members_arrive(tables: TableStore) -> None:
    coord, clock, _ = coordinator(tables, group_initial_rebalance_delay_ms=3000)
    a = join(coord, "g")
    clock.advance(2)
    b = join(coord, "g")
    clock.advance(1)  # t=3: the first delay ends, but B arrived meanwhile: wait another 3 s
    assert a == [] and b == []
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    clock.advance(2.9)
    assert a == [] and b == []
    clock.advance(0.1)
    assert a[0].error is E.NONE and b[0].error is E.NONE
    assert a[0].generation_id == b[0].generation_id == 1
    assert len(a[0].members) == 2 and b[0].members == []


def test_initial_delay_is_bounded_by_the_rebalance_timeout(tables: TableStore) -> None:
    coord, clock, _ = coordinator(tables, group_initial_rebalance_delay_ms=3000)
    first = join(coord, "g", rebalance=4000)
    for _ in range(4):  # a member every second keeps the delay extending, up to the timeout
        clock.advance(1)
        join(coord, "g", rebalance=4000)
    clock.advance(1)  # the delay ran 3 s, then min(3 s, the 1 s left of the 4 s timeout), then stopped
    assert first and first[0].error is E.NONE


def test_offsets_expire_by_retention(tables: TableStore) -> None:
    coord, clock, tables = coordinator(tables)
    coord.offsets.commit_offsets("simple", "", None, -1, {("t", 0): OffsetAndMetadata(5, commit_timestamp=0)}, 9)
    # A v2-v4 commit with its own retention time expires on its own schedule.
    coord.offsets.commit_offsets("simple2", "", None, -1, {("u", 0): OffsetAndMetadata(
        6, commit_timestamp=0, expire_timestamp=5_000)}, 2)
    assert table_len(tables, OFFSETS_TABLE) == 2
    clock.advance(10)  # first periodic check: only the explicit expiry is due
    assert "simple2" not in coord.groups and "simple" in coord.groups
    clock.advance(60)
    assert coord.offsets.expire_offsets() == 0  # the periodic check already removed it
    assert "simple" not in coord.groups
    assert table_len(tables, OFFSETS_TABLE) == 0 and table_len(tables, GROUPS_TABLE) == 0


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics(tables: TableStore) -> None:
    coord, clock, _ = coordinator(tables)
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"  # v0: topics ["t"], null user data
    results: list[JoinResult] = []
    coord.membership.join_group("c", "", None, False, False, "client", "/h", 100_000, 100_000, "consumer",
                     [("range", sub)]).addCallback(results.append)
    clock.advance(0)
    member, gen = results[0].member_id, results[0].generation_id
    synced: list[Any] = []
    coord.membership.sync_group("c", gen, member, None, None, None, {member: b""}).addCallback(synced.append)
    assert synced[0].error is E.NONE
    now = int(clock.seconds() * 1000)
    offsets = {("t", 0): OffsetAndMetadata(1, commit_timestamp=now), ("u", 0): OffsetAndMetadata(2, commit_timestamp=now)}
    coord.offsets.commit_offsets("c", member, None, gen, offsets, 9)
    for _ in range(7):
        clock.advance(10)
        coord.membership.heartbeat("c", member, None, gen)
    assert set(coord.groups["c"].offsets) == {("t", 0)}


def test_restored_members_must_keep_heartbeating(tables: TableStore) -> None:
    coord, clock, tables = coordinator(tables)
    results = join(coord, "g", session=5000)
    clock.advance(0)
    member, gen = results[0].member_id, results[0].generation_id
    coord.membership.sync_group("g", gen, member, None, None, None, {member: b"assigned"})
    # A restart: a new coordinator over the same tables brings the member back, session running.
    restarted, clock2, _ = coordinator(tables)
    group = restarted.groups["g"]
    assert group.state is GroupState.STABLE and list(group.members) == [member]
    assert group.members[member].assignment == b"assigned"
    clock2.advance(4)
    assert restarted.membership.heartbeat("g", member, None, gen) is E.NONE
    clock2.advance(4.9)
    assert member in group.members
    clock2.advance(0.2)  # 5 s since the last heartbeat: gone, and the empty group is persisted
    assert group.members == {}
    clock2.advance(0)
    assert group.state is GroupState.EMPTY and group.generation_id == gen + 1


def test_deleted_topic_offsets_are_dropped_at_load(tables: TableStore) -> None:
    coord, _, tables = coordinator(tables)
    coord.offsets.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(5), ("u", 1): OffsetAndMetadata(6)}, 9)
    restarted = group_coordinator(tables, KafkaConfig(), Topics("t"), clock=Clock())
    restarted.load()
    assert set(restarted.groups["g"].offsets) == {("t", 0)}
    assert table_len(tables, OFFSETS_TABLE) == 1


@pytest.mark.parametrize("timeout", [-1, 0])
def test_odd_rebalance_timeouts_do_not_break_timers(tables: TableStore, timeout: int) -> None:
    coord, clock, _ = coordinator(tables)
    results = join(coord, "g", rebalance=timeout)
    clock.advance(0)
    assert results[0].error is E.NONE


def test_a_failed_load_answers_coordinator_not_available_then_retries(tables: TableStore) -> None:
    class Broken(TableStore):
        """A real table store whose first calls fail, as while its store is still recovering."""

        fail = True

        def exists(self, name: str) -> bool:
            if self.fail:
                raise OSError("store offline")
            return super().exists(name)

    tables = Broken(tables.store)
    coord = group_coordinator(tables, KafkaConfig(), clock=Clock())
    answers: list[Any] = []
    outcome = coord.call(lambda c: c.membership.heartbeat("g", "m", None, 1))
    outcome.addCallback(answers.append)
    assert answers == [E.COORDINATOR_NOT_AVAILABLE] and not coord.loaded
    tables.fail = False
    assert coord.call(lambda c: c.membership.heartbeat("g", "m", None, 1)).result is E.UNKNOWN_MEMBER_ID
    assert coord.loaded


class FailingWrites(TableStore):
    """A real table store whose writes fail with ``error`` while it is set."""

    error: BaseException | None = None
    failed = False

    def put(self, table: str, entries: Any) -> Any:
        if self.error is not None:
            self.failed = True
            raise self.error
        return super().put(table, entries)


@pytest.mark.parametrize(("error", "expected"), [
    # An unexpected store failure is a server error, not a coordinator to look for elsewhere.
    (DataCorruptionError("a table record failed its checksum"), E.UNKNOWN_SERVER_ERROR),
    # This node's hold on the table's log was fenced: another node coordinates now.
    (DataLogWriterFencedError("epoch superseded"), E.NOT_COORDINATOR),
    (ContainerOfflineError("container 2 is recovering"), E.COORDINATOR_NOT_AVAILABLE),
    (TimeoutError("no answer"), E.COORDINATOR_NOT_AVAILABLE),
])
def test_a_failed_write_answers_the_code_of_its_cause(tables: TableStore, error: BaseException,
                                                      expected: E) -> None:
    failing = FailingWrites(tables.store)
    coord, clock, _ = coordinator(failing)
    failing.error = error
    answers: list[Any] = []
    coord.offsets.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(5)}, 9).addCallback(answers.append)
    assert answers == [{("t", 0): expected}]
    # The leader's assignment of a classic group, written before SyncGroup answers, fails the same way.
    joined = join(coord, "c")
    clock.advance(0)  # the join completes (no initial delay here)
    failed: list[Any] = []
    coord.membership.sync_group("c", 1, joined[0].member_id, None, "consumer", "range",
                                {joined[0].member_id: b"a"}).addCallback(failed.append)
    assert failed[0].error is expected


def test_a_write_failing_because_the_coordinator_moved_answers_not_coordinator(tables: TableStore) -> None:
    failing = FailingWrites(tables.store)
    coord, _, _ = coordinator(failing)
    failing.error = ContainerOfflineError("container 2 stopped here")
    # The groups' container moved away while the write was out: from then on this node does not coordinate.
    coord.coordinator_check = lambda: E.NOT_COORDINATOR if failing.failed else None
    answers: list[Any] = []
    coord.offsets.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(5)}, 9).addCallback(answers.append)
    assert failing.failed and answers == [{("t", 0): E.NOT_COORDINATOR}]
