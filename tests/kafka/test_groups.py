"""The classic group coordinator over a real server, spoken with our codec on raw sockets:
membership and rebalances, static members, session expiry, offsets (durable across SIGKILL), group
administration, and every advertised API version at both ends of its range."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest

from millrace.gateway.kafka_protocol.codec import encode_message, message_class, request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode as E
from tests.kafka.wire import KafkaWire
from tests.server_process import ServerProcess

FIND, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 15, 16, 42, 47
CREATE_TOPICS, DELETE_TOPICS, API_VERSIONS = 19, 20, 18

JoinReq, SyncReq, LeaveReq = request_class(JOIN), request_class(SYNC), request_class(LEAVE)
CommitReq, FetchReq, OffDelReq = request_class(COMMIT), request_class(FETCH), request_class(OFFSET_DELETE)


def subscription(*topics: str) -> bytes:
    """A consumer protocol subscription (v0) with its version prefix, as clients send it."""
    sub = message_class("ConsumerProtocolSubscription")(topics=list(topics))
    return struct.pack(">h", 0) + encode_message("ConsumerProtocolSubscription", 0, sub)


def protocols(*topics: str, name: str = "range") -> list[Any]:
    return [JoinReq.JoinGroupRequestProtocol(name=name, metadata=subscription(*topics))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    proc = ServerProcess(str(tmp_path_factory.mktemp("groups"))).start()
    yield proc
    proc.kill()


@pytest.fixture
def wire(server: ServerProcess):
    with KafkaWire.connect(server.bootstrap) as w:
        yield w


def connect(server: ServerProcess) -> KafkaWire:
    return KafkaWire.connect(server.bootstrap)


def create_topic(w: KafkaWire, name: str, partitions: int = 3) -> None:
    req = request_class(CREATE_TOPICS)
    resp = w.send(CREATE_TOPICS, 4, req(timeout_ms=10000, topics=[
        req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)]))
    assert resp.topics[0].error_code in (0, E.TOPIC_ALREADY_EXISTS), resp


def join_req(group: str, member_id: str = "", instance: str | None = None, session: int = 10000,
             rebalance: int = 10000, protos: list[Any] | None = None, protocol_type: str = "consumer") -> Any:
    return JoinReq(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance, member_id=member_id,
                   group_instance_id=instance, protocol_type=protocol_type,
                   protocols=protos if protos is not None else protocols("t"))


def join_new(w: KafkaWire, group: str, version: int = 9, **kw: Any) -> Any:
    """A dynamic member's two-step join (v4+): MEMBER_ID_REQUIRED, then the join proper."""
    first = w.send(JOIN, version, join_req(group, **kw))
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    return w.send(JOIN, version, join_req(group, member_id=first.member_id, **kw))


def sync(w: KafkaWire, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
         version: int = 5, instance: str | None = None) -> Any:
    return w.send(SYNC, version, SyncReq(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance,
        protocol_type="consumer" if version >= 5 else None, protocol_name="range" if version >= 5 else None,
        assignments=[SyncReq.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in (assignments or {}).items()]))


def heartbeat(w: KafkaWire, group: str, generation: int, member_id: str, version: int = 4,
              instance: str | None = None) -> int:
    return w.request(HEARTBEAT, version, group_id=group, generation_id=generation, member_id=member_id,
                     group_instance_id=instance).error_code


def single_member_group(w: KafkaWire, group: str, assignment: bytes = b"A", **kw: Any) -> tuple[str, int]:
    joined = join_new(w, group, **kw)
    assert joined.error_code == 0, joined
    synced = sync(w, group, joined.generation_id, joined.member_id, {joined.member_id: assignment})
    assert synced.error_code == 0 and synced.assignment == assignment
    return joined.member_id, joined.generation_id


def commit(w: KafkaWire, group: str, offsets: dict[tuple[str, int], int], version: int = 9, generation: int = -1,
           member_id: str = "", metadata: str | None = "m", epoch: int = -1) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(CommitReq.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=epoch if version >= 6 else -1,
            committed_metadata=metadata))
    resp = w.send(COMMIT, version, CommitReq(
        group_id=group, generation_id_or_member_epoch=generation if version >= 1 else -1,
        member_id=member_id if version >= 1 else "",
        topics=[CommitReq.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetch(w: KafkaWire, group: str, partitions: list[tuple[str, int]] | None, version: int = 9
          ) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None, int]]]:
    """(group error, {tp: (offset, leader epoch, metadata, error)})."""
    def topics(cls_topic: Any) -> list[Any] | None:
        if partitions is None:
            return None
        by: dict[str, list[int]] = {}
        for t, p in partitions:
            by.setdefault(t, []).append(p)
        return [cls_topic(name=t, partition_indexes=ps) for t, ps in by.items()]

    if version >= 8:
        req_group = FetchReq.OffsetFetchRequestGroup(group_id=group)
        req_group.topics = topics(FetchReq.OffsetFetchRequestTopics)  # the constructor turns None into []
        resp = w.send(FETCH, version, FetchReq(groups=[req_group]))
        g = resp.groups[0]
        assert g.group_id == group
        return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata,
                                                             p.error_code) for t in g.topics for p in t.partitions}
    req = FetchReq(group_id=group)
    req.topics = topics(FetchReq.OffsetFetchRequestTopic)
    resp = w.send(FETCH, version, req)
    return (resp.error_code if version >= 2 else 0), {
        (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
        for t in resp.topics for p in t.partitions}


def describe(w: KafkaWire, group: str, version: int = 5) -> Any:
    return w.request(DESCRIBE, version, groups=[group], include_authorized_operations=False).groups[0]


# -- FindCoordinator / ApiVersions ---------------------------------------------------------------

def test_api_versions_advertise_group_apis(wire: KafkaWire) -> None:
    resp = wire.request(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[FIND] == (0, 6) and ranges[JOIN] == (0, 9) and ranges[SYNC] == (0, 5)
    assert ranges[HEARTBEAT] == (0, 4) and ranges[LEAVE] == (0, 5)
    assert ranges[COMMIT] == (0, 9) and ranges[FETCH] == (0, 9)
    assert ranges[DESCRIBE] == (0, 5) and ranges[LIST] == (0, 5) and ranges[DELETE] == (0, 2)
    assert ranges[OFFSET_DELETE] == (0, 0)


def test_find_coordinator_all_versions(server: ServerProcess, wire: KafkaWire) -> None:
    for version in range(0, 4):
        fields = {"key": "g"} | ({"key_type": 0} if version >= 1 else {})
        resp = wire.request(FIND, version, **fields)
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 0, "127.0.0.1", server.kafka_port)
    resp = wire.request(FIND, 3, key="txn", key_type=1)  # this node coordinates transactions too
    assert (resp.error_code, resp.node_id, resp.port) == (0, 0, server.kafka_port)
    for version in (4, 6):
        resp = wire.request(FIND, version, key_type=0, coordinator_keys=["a", "b"])
        assert [(c.key, c.error_code, c.node_id, c.port) for c in resp.coordinators] == [
            ("a", 0, 0, server.kafka_port), ("b", 0, 0, server.kafka_port)]
        resp = wire.request(FIND, version, key_type=1, coordinator_keys=["tx"])
        assert (resp.coordinators[0].error_code, resp.coordinators[0].node_id) == (0, 0)
    assert wire.request(FIND, 6, key_type=2, coordinator_keys=["s"]).coordinators[0].error_code == \
        E.COORDINATOR_NOT_AVAILABLE
    assert wire.request(FIND, 5, key_type=7, coordinator_keys=["x"]).coordinators[0].error_code == E.INVALID_REQUEST


# -- membership --------------------------------------------------------------------------------

def test_member_id_required_then_single_member_group(wire: KafkaWire) -> None:
    first = wire.send(JOIN, 4, join_req("g-required"))
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("millrace-test-")
    assert first.generation_id == -1 and first.members == []
    # The pending member holds a place: describe shows no member yet, the group is Empty.
    assert describe(wire, "g-required").group_state == "Empty"
    joined = wire.send(JOIN, 4, join_req("g-required", member_id=first.member_id))
    assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == first.member_id
    assert [m.member_id for m in joined.members] == [first.member_id]
    assert joined.protocol_name == "range"
    synced = sync(wire, "g-required", 1, first.member_id, {first.member_id: b"mine"}, version=3)
    assert synced.error_code == 0 and synced.assignment == b"mine"
    assert heartbeat(wire, "g-required", 1, first.member_id, version=3) == 0
    d = describe(wire, "g-required")
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert d.members[0].member_assignment == b"mine" and d.members[0].client_host == "/127.0.0.1"


def test_old_join_versions_get_member_id_at_once(wire: KafkaWire) -> None:
    for version, group in ((0, "g-v0"), (3, "g-v3")):
        joined = wire.send(JOIN, version, join_req(group))
        assert joined.error_code == 0 and joined.member_id and joined.generation_id == 1
        assert joined.protocol_name == "range" and joined.leader == joined.member_id
        synced = sync(wire, group, 1, joined.member_id, {joined.member_id: b"x"}, version=0)
        assert synced.error_code == 0 and synced.assignment == b"x"
        assert heartbeat(wire, group, 1, joined.member_id, version=0) == 0
        assert wire.request(LEAVE, 0, group_id=group, member_id=joined.member_id).error_code == 0
        assert describe(wire, group, version=0).group_state == "Empty"


def test_two_members_rebalance_and_leave(server: ServerProcess) -> None:
    group = "g-two"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group)
        # B joins: the group starts a rebalance and B's JoinGroup waits for A to rejoin.
        first = b.send(JOIN, 9, join_req(group))
        b.submit(JOIN, 9, join_req(group, member_id=first.member_id))
        b_id = first.member_id
        deadline = time.time() + 10
        while heartbeat(a, group, gen, a_id) != E.REBALANCE_IN_PROGRESS:
            assert time.time() < deadline
            time.sleep(0.05)
        assert describe(a, group).group_state == "PreparingRebalance"
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id))
        b_join = b.receive()
        assert a_join.error_code == b_join.error_code == 0
        assert a_join.generation_id == b_join.generation_id == gen + 1
        assert a_join.leader == b_join.leader == a_id
        assert sorted(m.member_id for m in a_join.members) == sorted([a_id, b_id])
        assert b_join.members == []  # only the leader gets the members
        # The follower's SyncGroup waits for the leader's assignment.
        b.submit(SYNC, 5, SyncReq(group_id=group, generation_id=gen + 1, member_id=b_id, protocol_type="consumer",
                                  protocol_name="range", assignments=[]))
        with pytest.raises(TimeoutError):
            b.receive(timeout=0.3)
        assert heartbeat(a, group, gen + 1, a_id) == 0  # CompletingRebalance: heartbeats are fine
        a_sync = sync(a, group, gen + 1, a_id, {a_id: b"a-part", b_id: b"b-part"})
        b_sync = b.receive()
        assert (a_sync.error_code, a_sync.assignment) == (0, b"a-part")
        assert (b_sync.error_code, b_sync.assignment, b_sync.protocol_name) == (0, b"b-part", "range")
        assert describe(a, group).group_state == "Stable"
        # B leaves (v5 batch form): A learns of the rebalance from its heartbeat and rejoins alone.
        left = b.send(LEAVE, 5, LeaveReq(group_id=group, members=[
            LeaveReq.MemberIdentity(member_id=b_id, reason="done")]))
        assert left.error_code == 0 and [(m.member_id, m.error_code) for m in left.members] == [(b_id, 0)]
        assert heartbeat(a, group, gen + 1, a_id) == E.REBALANCE_IN_PROGRESS
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id))
        assert a_join.error_code == 0 and a_join.generation_id == gen + 2
        assert [m.member_id for m in a_join.members] == [a_id]
        assert sync(a, group, gen + 2, a_id, {a_id: b"all"}).assignment == b"all"
        # A member that already left is unknown.
        assert heartbeat(b, group, gen + 2, b_id) == E.UNKNOWN_MEMBER_ID


def test_initial_rebalance_delay_gathers_members_arriving_together(tmp_path: Any) -> None:
    """With the server's default group.initial.rebalance.delay.ms (Kafka's 3 s) a new group's first
    rebalance waits for members still arriving: two members 50 ms apart share generation 1 instead of
    the first completing alone and the second forcing generation 2."""
    with ServerProcess(str(tmp_path / "data"), group_initial_rebalance_delay_ms=None) as server, \
            connect(server) as a, connect(server) as b:
        group = "g-initial-delay"
        started = time.monotonic()
        a_first = a.send(JOIN, 9, join_req(group))
        a.submit(JOIN, 9, join_req(group, member_id=a_first.member_id))
        time.sleep(0.05)
        b_first = b.send(JOIN, 9, join_req(group))
        b.submit(JOIN, 9, join_req(group, member_id=b_first.member_id))
        a_join, b_join = a.receive(timeout=15), b.receive(timeout=15)
        assert a_join.error_code == b_join.error_code == 0
        assert a_join.generation_id == b_join.generation_id == 1
        leader = a_join if a_join.members else b_join
        assert sorted(m.member_id for m in leader.members) == sorted([a_first.member_id, b_first.member_id])
        assert time.monotonic() - started >= 3.0  # the delay (extended by B's arrival) was waited for


def test_leader_leaving_during_join_elects_a_joined_leader(server: ServerProcess) -> None:
    group = "g-leader-leaves"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group)
        first = b.send(JOIN, 9, join_req(group))
        b.submit(JOIN, 9, join_req(group, member_id=first.member_id))
        time.sleep(0.2)
        # The old leader leaves instead of rejoining: B becomes leader of the next generation.
        assert a.request(LEAVE, 2, group_id=group, member_id=a_id).error_code == 0
        b_join = b.receive()
        assert b_join.error_code == 0 and b_join.leader == first.member_id and b_join.generation_id == gen + 1
        assert [m.member_id for m in b_join.members] == [first.member_id]


def test_session_expiry_removes_member_and_rebalances(server: ServerProcess) -> None:
    group = "g-expiry"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group, session=1000, rebalance=3000)
        first = b.send(JOIN, 9, join_req(group, session=1000, rebalance=3000))
        b.submit(JOIN, 9, join_req(group, member_id=first.member_id, session=1000, rebalance=3000))
        time.sleep(0.1)
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id, session=1000, rebalance=3000))
        b_join = b.receive()
        gen = a_join.generation_id
        assert sync(a, group, gen, a_id, {a_id: b"1", b_join.member_id: b"2"}).error_code == 0
        assert sync(b, group, gen, b_join.member_id).assignment == b"2"
        # B goes silent; A keeps heartbeating and sees the rebalance once B's session expires.
        start = time.time()
        while True:
            error = heartbeat(a, group, gen, a_id)
            if error == E.REBALANCE_IN_PROGRESS:
                break
            assert error == 0 and time.time() - start < 5
            time.sleep(0.2)
        assert time.time() - start >= 0.7  # not before the session timeout
        assert [m.member_id for m in describe(a, group).members] == [a_id]
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id, session=1000, rebalance=3000))
        assert a_join.error_code == 0 and a_join.generation_id == gen + 1 and len(a_join.members) == 1
        assert heartbeat(b, group, gen, b_join.member_id) == E.UNKNOWN_MEMBER_ID


def test_member_not_rejoining_within_rebalance_timeout_is_dropped(server: ServerProcess) -> None:
    group = "g-rebalance-timeout"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group, session=10000, rebalance=1500)
        first = b.send(JOIN, 9, join_req(group, session=10000, rebalance=1500))
        start = time.time()
        b_join = b.send(JOIN, 9, join_req(group, member_id=first.member_id, session=10000, rebalance=1500))
        # A heartbeats but never rejoins: the join completes without it after the rebalance timeout.
        assert time.time() - start >= 1.2
        assert b_join.error_code == 0 and b_join.leader == first.member_id and b_join.generation_id == gen + 1
        assert [m.member_id for m in b_join.members] == [first.member_id]
        assert heartbeat(a, group, gen, a_id) == E.UNKNOWN_MEMBER_ID


def test_member_not_syncing_within_rebalance_timeout_is_dropped(server: ServerProcess) -> None:
    group = "g-sync-timeout"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group, session=10000, rebalance=1500)
        first = b.send(JOIN, 9, join_req(group, session=10000, rebalance=1500))
        b.submit(JOIN, 9, join_req(group, member_id=first.member_id, session=10000, rebalance=1500))
        time.sleep(0.1)
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id, session=10000, rebalance=1500))
        assert b.receive().error_code == 0
        gen = a_join.generation_id
        assert sync(a, group, gen, a_id, {a_id: b"a", first.member_id: b"b"}).error_code == 0
        # B never sends SyncGroup: after the rebalance timeout it is removed and A must rejoin.
        start = time.time()
        while heartbeat(a, group, gen, a_id) == 0:
            assert time.time() - start < 5
            time.sleep(0.1)
        assert time.time() - start >= 1.0
        assert heartbeat(a, group, gen, a_id) == E.REBALANCE_IN_PROGRESS
        assert [m.member_id for m in describe(a, group).members] == [a_id]


def test_pending_member_expires_and_releases_the_rebalance(server: ServerProcess) -> None:
    group = "g-pending"
    with connect(server) as a, connect(server) as b:
        a_id, gen = single_member_group(a, group, session=1000)
        # B gets a member id but never comes back; A's rejoin completes once B's pending place expires.
        assert b.send(JOIN, 9, join_req(group, session=1000)).error_code == E.MEMBER_ID_REQUIRED
        a_join = a.send(JOIN, 9, join_req(group, member_id=a_id, session=1000))
        assert a_join.error_code == 0 and [m.member_id for m in a_join.members] == [a_id]


def test_static_membership(server: ServerProcess) -> None:
    group = "g-static"
    with connect(server) as a, connect(server) as b:
        # A static member joins in one step (no MEMBER_ID_REQUIRED).
        joined = a.send(JOIN, 5, join_req(group, instance="inst-a"))
        assert joined.error_code == 0 and joined.member_id.startswith("inst-a-")
        assert joined.members[0].group_instance_id == "inst-a"
        a_id, gen = joined.member_id, joined.generation_id
        assert sync(a, group, gen, a_id, {a_id: b"static"}, instance="inst-a").error_code == 0
        d = describe(a, group)
        assert d.members[0].group_instance_id == "inst-a"
        assert describe(a, group, version=0).members[0].member_id == a_id
        # The same instance restarts with no member id: new id, same generation, no rebalance; v9
        # tells the returning leader to skip the assignment.
        again = b.send(JOIN, 9, join_req(group, instance="inst-a"))
        assert again.error_code == 0 and again.member_id != a_id and again.generation_id == gen
        assert again.skip_assignment is True and again.leader == again.member_id
        assert [m.member_id for m in again.members] == [again.member_id]
        assert sync(b, group, gen, again.member_id, instance="inst-a").assignment == b"static"
        # The old incarnation is fenced.
        assert heartbeat(a, group, gen, a_id, instance="inst-a") == E.FENCED_INSTANCE_ID
        assert heartbeat(b, group, gen, again.member_id, instance="inst-a") == 0
        assert describe(a, group).group_state == "Stable"
        # Before v9 the returning leader is not told it leads (the old leader id is named).
        third = a.send(JOIN, 8, join_req(group, instance="inst-a"))
        assert third.error_code == 0 and third.leader == again.member_id and third.members == []
        assert third.generation_id == gen
        # Administrative removal by instance id (empty member id).
        left = a.send(LEAVE, 3, LeaveReq(group_id=group, members=[
            LeaveReq.MemberIdentity(member_id="", group_instance_id="inst-a"),
            LeaveReq.MemberIdentity(member_id="", group_instance_id="inst-unknown")]))
        assert [(m.group_instance_id, m.error_code) for m in left.members] == [
            ("inst-a", 0), ("inst-unknown", E.UNKNOWN_MEMBER_ID)]
        deadline = time.time() + 5
        while describe(a, group).group_state != "Empty":
            assert time.time() < deadline
            time.sleep(0.05)


def test_refusals(server: ServerProcess, wire: KafkaWire) -> None:
    group = "g-refuse"
    a_id, gen = single_member_group(wire, group)
    assert heartbeat(wire, group, gen + 5, a_id) == E.ILLEGAL_GENERATION
    assert heartbeat(wire, group, gen, "nobody") == E.UNKNOWN_MEMBER_ID
    assert heartbeat(wire, "no-such-group", 1, "nobody") == E.UNKNOWN_MEMBER_ID
    assert heartbeat(wire, "", 1, "x") == E.INVALID_GROUP_ID
    assert sync(wire, group, gen + 1, a_id).error_code == E.ILLEGAL_GENERATION
    assert sync(wire, group, gen, "nobody").error_code == E.UNKNOWN_MEMBER_ID
    bad = wire.send(SYNC, 5, SyncReq(group_id=group, generation_id=gen, member_id=a_id, protocol_type="consumer",
                                     protocol_name="roundrobin", assignments=[]))
    assert bad.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    missing = wire.send(SYNC, 5, SyncReq(group_id=group, generation_id=gen, member_id=a_id, assignments=[]))
    assert missing.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    for session in (999, 300001):
        assert wire.send(JOIN, 9, join_req(group, session=session)).error_code == E.INVALID_SESSION_TIMEOUT
    assert wire.send(JOIN, 9, join_req("")).error_code == E.INVALID_GROUP_ID
    other = wire.send(JOIN, 3, join_req(group, protocol_type="connect"))
    assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    no_common = wire.send(JOIN, 3, join_req(group, protos=protocols("t", name="sticky")))
    assert no_common.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert wire.send(JOIN, 9, join_req(group, member_id="ghost")).error_code == E.UNKNOWN_MEMBER_ID
    assert wire.send(JOIN, 9, join_req("fresh-group", member_id="ghost")).error_code == E.UNKNOWN_MEMBER_ID
    # Leave v0-v2 reports the member's error at the top level.
    assert wire.request(LEAVE, 1, group_id=group, member_id="ghost").error_code == E.UNKNOWN_MEMBER_ID
    assert wire.request(LEAVE, 4, group_id="no-such", members=[
        LeaveReq.MemberIdentity(member_id="x")]).members[0].error_code == E.UNKNOWN_MEMBER_ID
    # Commits from a stale generation or an unknown member are refused.
    create_topic(wire, "refuse-topic", 1)
    assert commit(wire, group, {("refuse-topic", 0): 1}, generation=gen + 1, member_id=a_id) == {
        ("refuse-topic", 0): E.ILLEGAL_GENERATION}
    assert commit(wire, group, {("refuse-topic", 0): 1}, generation=gen, member_id="ghost") == {
        ("refuse-topic", 0): E.UNKNOWN_MEMBER_ID}
    # A non-empty group takes no commits without a member id.
    assert commit(wire, group, {("refuse-topic", 0): 1}, version=0) == {("refuse-topic", 0): E.UNKNOWN_MEMBER_ID}
    assert commit(wire, group, {("refuse-topic", 0): 7}, generation=gen, member_id=a_id) == {("refuse-topic", 0): 0}


# -- offsets -----------------------------------------------------------------------------------

def test_commit_and_fetch_at_every_version(wire: KafkaWire) -> None:
    create_topic(wire, "offs", 10)
    group = "g-offsets"
    for version in range(0, 10):
        result = commit(wire, group, {("offs", version): 100 + version}, version=version, metadata=f"v{version}",
                        epoch=version)
        assert result == {("offs", version): 0}
    for version in range(0, 10):
        error, got = fetch(wire, group, [("offs", p) for p in range(10)] + [("offs-unknown", 0)], version=version)
        assert error == 0
        for p in range(10):
            offset, epoch, metadata, perr = got[("offs", p)]
            assert (offset, metadata, perr) == (100 + p, f"v{p}", 0)
            assert epoch == (p if p >= 6 and version >= 5 else -1)
        assert got[("offs-unknown", 0)][0] == -1 and got[("offs-unknown", 0)][3] == 0
    # All of the group's offsets (null topics), v2+.
    for version in (2, 7, 8, 9):
        error, got = fetch(wire, group, None, version=version)
        assert error == 0 and sorted(got) == [("offs", p) for p in range(10)]
    # The v8+ multi-group form answers every group.
    never = FetchReq.OffsetFetchRequestGroup(group_id="g-never")
    never.topics = None
    resp = wire.send(FETCH, 8, FetchReq(groups=[
        FetchReq.OffsetFetchRequestGroup(group_id=group, topics=[
            FetchReq.OffsetFetchRequestTopics(name="offs", partition_indexes=[3])]), never]))
    assert [g.group_id for g in resp.groups] == [group, "g-never"]
    assert resp.groups[0].topics[0].partitions[0].committed_offset == 103
    assert resp.groups[1].topics == [] and resp.groups[1].error_code == 0
    # Null metadata is stored as "".
    assert commit(wire, group, {("offs", 0): 5}, metadata=None) == {("offs", 0): 0}
    assert fetch(wire, group, [("offs", 0)])[1][("offs", 0)][:3] == (5, -1, "")


def test_commit_refusals(wire: KafkaWire) -> None:
    create_topic(wire, "offs-small", 2)
    result = commit(wire, "g-commit-refusals", {("offs-small", 0): 1, ("offs-small", 2): 1, ("nope", 0): 1})
    assert result == {("offs-small", 0): 0, ("offs-small", 2): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert commit(wire, "g-commit-refusals", {("offs-small", 1): 1}, metadata="x" * 5000) == {
        ("offs-small", 1): E.OFFSET_METADATA_TOO_LARGE}
    # A group member's commit to a group that does not exist: ILLEGAL_GENERATION before v9.
    assert commit(wire, "g-absent", {("offs-small", 0): 1}, version=8, generation=3, member_id="m") == {
        ("offs-small", 0): E.ILLEGAL_GENERATION}
    assert commit(wire, "g-absent", {("offs-small", 0): 1}, version=9, generation=3, member_id="m") == {
        ("offs-small", 0): E.GROUP_ID_NOT_FOUND}


def test_transactional_commit_without_member_is_accepted_by_a_group_with_members(wire: KafkaWire) -> None:
    """TxnOffsetCommit v0-v2 carries no member id or generation (aiokafka and older clients send it so):
    Kafka exempts such transactional commits from the member check OffsetCommit v0 gets, so a consumer
    group with members takes them, and the offsets appear when the transaction commits."""
    group, txn_id = "g-txn-no-member", "txn-no-member"
    create_topic(wire, "txn-in", 1)
    single_member_group(wire, group)
    producer = wire.request(22, 1, transactional_id=txn_id, transaction_timeout_ms=60000)
    assert producer.error_code == 0
    ids = {"transactional_id": txn_id, "producer_id": producer.producer_id,
           "producer_epoch": producer.producer_epoch}
    assert wire.request(25, 1, group_id=group, **ids).error_code == 0  # AddOffsetsToTxn
    Txn = request_class(28)
    committed = wire.send(28, 2, Txn(group_id=group, **ids, topics=[Txn.TxnOffsetCommitRequestTopic(
        name="txn-in", partitions=[Txn.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]))
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    assert wire.request(26, 1, committed=True, **ids).error_code == 0  # EndTxn
    deadline = time.time() + 10
    while fetch(wire, group, [("txn-in", 0)])[1][("txn-in", 0)][0] != 7:  # the markers complete it
        assert time.time() < deadline
        time.sleep(0.05)


def test_standalone_commits_create_a_simple_group(wire: KafkaWire) -> None:
    create_topic(wire, "simple-topic", 2)
    assert commit(wire, "g-simple", {("simple-topic", 0): 42, ("simple-topic", 1): 43}, version=2) == {
        ("simple-topic", 0): 0, ("simple-topic", 1): 0}
    listed = {g.group_id: g for g in wire.request(LIST, 4, states_filter=[]).groups}
    assert listed["g-simple"].protocol_type == "" and listed["g-simple"].group_state == "Empty"
    assert fetch(wire, "g-simple", [("simple-topic", 1)], version=1)[1][("simple-topic", 1)][0] == 43
    # A simple group can become a managed one, and its offsets stay.
    member, gen = single_member_group(wire, "g-simple")
    assert fetch(wire, "g-simple", [("simple-topic", 0)])[1][("simple-topic", 0)][0] == 42
    assert commit(wire, "g-simple", {("simple-topic", 0): 50}, generation=gen, member_id=member) == {
        ("simple-topic", 0): 0}


def test_describe_list_delete_groups(server: ServerProcess, wire: KafkaWire) -> None:
    create_topic(wire, "admin-topic", 1)
    member, gen = single_member_group(wire, "g-admin-stable")
    commit(wire, "g-admin-empty", {("admin-topic", 0): 9})
    d = wire.request(DESCRIBE, 3, groups=["g-admin-stable"], include_authorized_operations=True).groups[0]
    # No authorizer: every group operation Kafka 4 supports (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
    # ALTER_CONFIGS).
    assert d.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    assert describe(wire, "g-admin-stable", version=2).authorized_operations == -(2 ** 31)
    unknown = describe(wire, "g-admin-unknown")
    assert (unknown.error_code, unknown.group_state, unknown.members) == (0, "Dead", [])
    all_groups = {g.group_id: g for g in wire.request(LIST, 0).groups}
    assert all_groups["g-admin-stable"].protocol_type == "consumer" and "g-admin-empty" in all_groups
    stable = [g.group_id for g in wire.request(LIST, 4, states_filter=["Stable"]).groups]
    assert "g-admin-stable" in stable and "g-admin-empty" not in stable
    lower = [g.group_id for g in wire.request(LIST, 5, states_filter=["empty"], types_filter=["classic"]).groups]
    assert "g-admin-empty" in lower and "g-admin-stable" not in lower
    assert wire.request(LIST, 5, states_filter=[], types_filter=["consumer"]).groups == []
    assert all(g.group_type == "classic" for g in wire.request(LIST, 5, states_filter=[], types_filter=[]).groups)
    resp = wire.request(DELETE, 2, groups_names=["g-admin-stable", "g-admin-empty", "g-admin-unknown"])
    assert {r.group_id: r.error_code for r in resp.results} == {
        "g-admin-stable": E.NON_EMPTY_GROUP, "g-admin-empty": 0, "g-admin-unknown": E.GROUP_ID_NOT_FOUND}
    assert fetch(wire, "g-admin-empty", [("admin-topic", 0)])[1][("admin-topic", 0)][0] == -1
    assert wire.request(LEAVE, 0, group_id="g-admin-stable", member_id=member).error_code == 0
    deadline = time.time() + 5
    while describe(wire, "g-admin-stable").group_state != "Empty":
        assert time.time() < deadline
        time.sleep(0.05)
    assert wire.request(DELETE, 0, groups_names=["g-admin-stable"]).results[0].error_code == 0
    assert describe(wire, "g-admin-stable").group_state == "Dead"


def test_offset_delete(wire: KafkaWire) -> None:
    create_topic(wire, "od-sub", 2)
    create_topic(wire, "od-other", 1)
    group = "g-offset-delete"
    member, gen = single_member_group(wire, group, protos=protocols("od-sub"))
    assert commit(wire, group, {("od-sub", 0): 1, ("od-sub", 1): 2, ("od-other", 0): 3}, generation=gen,
                  member_id=member) == {("od-sub", 0): 0, ("od-sub", 1): 0, ("od-other", 0): 0}
    resp = wire.send(OFFSET_DELETE, 0, OffDelReq(group_id=group, topics=[
        OffDelReq.OffsetDeleteRequestTopic(name="od-sub", partitions=[OffDelReq.OffsetDeleteRequestPartition(
            partition_index=0)]),
        OffDelReq.OffsetDeleteRequestTopic(name="od-other", partitions=[OffDelReq.OffsetDeleteRequestPartition(
            partition_index=0)]),
        OffDelReq.OffsetDeleteRequestTopic(name="od-missing", partitions=[OffDelReq.OffsetDeleteRequestPartition(
            partition_index=0)])]))
    assert resp.error_code == 0
    assert {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions} == {
        ("od-sub", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("od-other", 0): 0,
        ("od-missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    _, got = fetch(wire, group, [("od-sub", 0), ("od-other", 0)])
    assert got[("od-sub", 0)][0] == 1 and got[("od-other", 0)][0] == -1
    missing = wire.send(OFFSET_DELETE, 0, OffDelReq(group_id="g-od-none", topics=[]))
    assert missing.error_code == E.GROUP_ID_NOT_FOUND
    # Once the group is empty every offset can go; with none left the group is gone.
    assert wire.request(LEAVE, 5, group_id=group, members=[LeaveReq.MemberIdentity(member_id=member)]
                        ).members[0].error_code == 0
    resp = wire.send(OFFSET_DELETE, 0, OffDelReq(group_id=group, topics=[
        OffDelReq.OffsetDeleteRequestTopic(name="od-sub", partitions=[
            OffDelReq.OffsetDeleteRequestPartition(partition_index=0),
            OffDelReq.OffsetDeleteRequestPartition(partition_index=1)])]))
    assert resp.error_code == 0 and [p.error_code for p in resp.topics[0].partitions] == [0, 0]
    assert describe(wire, group).group_state == "Dead"


def test_deleting_a_topic_removes_its_offsets(wire: KafkaWire) -> None:
    create_topic(wire, "doomed", 1)
    create_topic(wire, "kept", 1)
    assert commit(wire, "g-doomed", {("doomed", 0): 5, ("kept", 0): 6}) == {("doomed", 0): 0, ("kept", 0): 0}
    resp = wire.request(DELETE_TOPICS, 4, topic_names=["doomed"], timeout_ms=10000)
    assert resp.responses[0].error_code == 0
    deadline = time.time() + 5
    while fetch(wire, "g-doomed", [("doomed", 0)])[1][("doomed", 0)][0] != -1:
        assert time.time() < deadline
        time.sleep(0.05)
    assert fetch(wire, "g-doomed", [("kept", 0)])[1][("kept", 0)][0] == 6


# -- durability --------------------------------------------------------------------------------

def test_groups_and_offsets_survive_sigkill(tmp_path) -> None:
    proc = ServerProcess(str(tmp_path / "data")).start()
    try:
        with KafkaWire.connect(proc.bootstrap) as w:
            create_topic(w, "durable", 4)
            member, gen = single_member_group(w, "g-durable", assignment=b"assigned", session=30000)
            offsets = {("durable", p): 1000 + p for p in range(4)}
            assert set(commit(w, "g-durable", offsets, generation=gen, member_id=member, epoch=3).values()) == {0}
            assert commit(w, "g-standalone", {("durable", 0): 77}, version=1) == {("durable", 0): 0}
            commit(w, "g-deleted", {("durable", 1): 5})
            assert w.request(DELETE, 1, groups_names=["g-deleted"]).results[0].error_code == 0
            # An acknowledged commit is durable: kill at once.
            assert commit(w, "g-durable", {("durable", 3): 2003}, generation=gen, member_id=member) == {
                ("durable", 3): 0}
        proc.kill()
        proc.start()
        with KafkaWire.connect(proc.bootstrap) as w:
            error, got = fetch(w, "g-durable", None)
            assert error == 0
            assert {tp: v[0] for tp, v in got.items()} == {**offsets, ("durable", 3): 2003}
            assert got[("durable", 0)][1:3] == (3, "m")
            assert fetch(w, "g-standalone", [("durable", 0)], version=0)[1][("durable", 0)][0] == 77
            assert fetch(w, "g-deleted", [("durable", 1)])[1][("durable", 1)][0] == -1
            assert "g-deleted" not in {g.group_id for g in w.request(LIST, 0).groups}
            # The group comes back as it was persisted after its sync: same generation, member
            # and assignment, so the live consumer carries on without a rebalance.
            d = describe(w, "g-durable")
            assert d.group_state == "Stable" and [m.member_id for m in d.members] == [member]
            assert d.members[0].member_assignment == b"assigned"
            assert heartbeat(w, "g-durable", gen, member) == 0
            assert sync(w, "g-durable", gen, member).assignment == b"assigned"
            assert commit(w, "g-durable", {("durable", 0): 1}, generation=gen, member_id=member) == {("durable", 0): 0}
            # Its session still runs: the member leaves and the group empties.
            assert w.request(LEAVE, 0, group_id="g-durable", member_id=member).error_code == 0
        proc.stop()
        proc.start()
        with KafkaWire.connect(proc.bootstrap) as w:
            d = describe(w, "g-durable")
            assert d.group_state == "Empty" and d.members == []
            assert fetch(w, "g-durable", [("durable", 0)])[1][("durable", 0)][0] == 1
            # The generation continues from the persisted one.
            joined = join_new(w, "g-durable")
            assert joined.generation_id == gen + 2
    finally:
        proc.kill()
