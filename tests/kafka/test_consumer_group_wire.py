"""The consumer group protocol's APIs on the wire against a real ``millrace serve``: what ApiVersions
advertises, ConsumerGroupHeartbeat v0/v1 join, heartbeat and leave, ConsumerGroupDescribe, how the
classic APIs (ListGroups v5 type filter, DescribeGroups, OffsetCommit v9, OffsetFetch v9) see a consumer
group, and a consumer group surviving a restart of the server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from millrace.gateway.kafka_protocol.errors import ErrorCode as E
from millrace.gateway.kafka_protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest as Hb,
)
from millrace.gateway.kafka_protocol.messages.offset_commit import OffsetCommitRequest as Oc
from millrace.gateway.kafka_protocol.messages.offset_fetch import OffsetFetchRequest as Of
from tests.kafka.wire import KafkaWire, local
from tests.server_process import ServerProcess

API_VERSIONS, HEARTBEAT, DESCRIBE = 18, 68, 69
LIST_GROUPS, DESCRIBE_GROUPS, OFFSET_COMMIT, OFFSET_FETCH, METADATA = 16, 15, 8, 9, 3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("kip848"))


@pytest.fixture(scope="module")
def server(data_dir: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(data_dir).start()
    yield proc
    proc.stop()


@pytest.fixture
def wire(server: ServerProcess) -> Iterator[KafkaWire]:
    w = local(server.kafka_port, client_id="kip848-test")
    yield w
    w.close()


def topic_id(wire: KafkaWire, name: str, partitions: int = 4) -> uuid.UUID:
    wire.create(name, partitions)
    md = wire.metadata(12, [name])
    return md.topics[0].topic_id


def join(wire: KafkaWire, group: str, member: str, topics: list[str], version: int = 1, **kw: object) -> object:
    return wire.request(HEARTBEAT, version, group_id=group, member_id=member, member_epoch=0,
                        rebalance_timeout_ms=30_000, subscribed_topic_names=topics, topic_partitions=[], **kw)


def test_api_versions_advertise_the_implemented_versions(wire: KafkaWire) -> None:
    r = wire.request(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    versions = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert versions[HEARTBEAT] == (0, 1)
    assert versions[DESCRIBE] == (0, 0)


def test_join_heartbeat_describe_and_leave(wire: KafkaWire) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    tid = topic_id(wire, name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    r = join(wire, group, "member-1", [name], server_assignor="range")
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "member-1", 1)
    assert r.heartbeat_interval_ms == 5000
    assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == [(tid, [0, 1, 2, 3])]
    # An incremental heartbeat: nothing changed, no assignment in the answer.
    r = wire.request(HEARTBEAT, 1, group_id=group, member_id="member-1", member_epoch=1)
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 1, None)
    # v0: the coordinator names the member.
    r0 = join(wire, group, "", [name], version=0)
    assert r0.error_code == 0 and len(r0.member_id) == 22 and r0.member_epoch == 2
    d = wire.request(DESCRIBE, 0, group_ids=[group, "no-such-group"], include_authorized_operations=True)
    g, missing = d.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0, "Reconciling", 2, 2, "range")
    assert g.authorized_operations != -(2**31)
    members = {m.member_id: m for m in g.members}
    assert members["member-1"].member_epoch == 1 and members["member-1"].subscribed_topic_names == [name]
    assert [p.topic_name for p in members["member-1"].target_assignment.topic_partitions] == [name]
    assert (missing.error_code, missing.error_message, missing.group_state) == (
        E.GROUP_ID_NOT_FOUND, "Group no-such-group not found.", "Dead")
    # Classic views of it.
    lg = wire.request(LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"])
    assert {(x.group_id, x.group_type, x.protocol_type) for x in lg.groups if x.group_id == group} == {
        (group, "consumer", "consumer")}
    lg = wire.request(LIST_GROUPS, 5, states_filter=[], types_filter=["classic"])
    assert group not in {x.group_id for x in lg.groups}
    dg = wire.request(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
    assert (dg.groups[0].error_code, dg.groups[0].group_state) == (E.GROUP_ID_NOT_FOUND, "Dead")
    # Leaving: epoch -1 answered with -1; the group stays with the other member.
    r = wire.request(HEARTBEAT, 1, group_id=group, member_id="member-1", member_epoch=-1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    d = wire.request(DESCRIBE, 0, group_ids=[group], include_authorized_operations=False)
    assert [m.member_id for m in d.groups[0].members] == [r0.member_id]


def test_offsets_of_a_consumer_group_on_the_wire(wire: KafkaWire) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    topic_id(wire, name, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    r = join(wire, group, "m", [name])
    epoch = r.member_epoch

    def commit(version: int, member_epoch: int) -> int:
        c = wire.request(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=member_epoch,
                         member_id="m", topics=[Oc.OffsetCommitRequestTopic(name=name, partitions=[
                             Oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=7,
                                                             committed_metadata="")])])
        return c.topics[0].partitions[0].error_code

    assert commit(9, epoch) == 0
    assert commit(9, epoch + 1) == E.STALE_MEMBER_EPOCH
    assert commit(8, epoch) == E.UNSUPPORTED_VERSION

    def fetch(member_id: str | None, member_epoch: int) -> tuple[int, list[int]]:
        request = Of.OffsetFetchRequestGroup(group_id=group, member_id=member_id, member_epoch=member_epoch)
        request.topics = None  # all of the group's (the constructor takes None for "the default", [])
        f = wire.request(OFFSET_FETCH, 9, groups=[request], require_stable=False)
        g = f.groups[0]
        return g.error_code, [p.committed_offset for t in g.topics for p in t.partitions]

    assert fetch("m", epoch) == (0, [7])
    assert fetch("m", epoch + 5)[0] == E.STALE_MEMBER_EPOCH
    assert fetch("x", epoch)[0] == E.UNKNOWN_MEMBER_ID
    assert fetch(None, -1) == (0, [7])  # admin clients


def test_a_consumer_group_survives_a_restart(data_dir: str, server: ServerProcess) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    with local(server.kafka_port) as w:
        tid = topic_id(w, name, 2)
        r = join(w, group, "m", [name], server_assignor="uniform")
        assert r.member_epoch == 1
    server.stop()
    server.start()
    with local(server.kafka_port) as w:
        d = w.request(DESCRIBE, 0, group_ids=[group], include_authorized_operations=False)
        g = d.groups[0]
        assert (g.error_code, g.group_epoch, g.group_state, g.assignor_name) == (0, 1, "Stable", "uniform")
        (m,) = g.members
        assert (m.member_id, m.member_epoch) == ("m", 1)
        # The member carries on at its epoch, owning what it had.
        r = w.request(HEARTBEAT, 1, group_id=group, member_id="m", member_epoch=1,
                      topic_partitions=[Hb.TopicPartitions(topic_id=tid, partitions=[0, 1])])
        assert (r.error_code, r.member_epoch) == (0, 1)
