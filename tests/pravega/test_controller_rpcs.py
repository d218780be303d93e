"""The controller RPCs Pravega's clients call beyond what ``pravega_client.StreamManager`` exposes
(segments, successors, cuts, endpoints), called over gRPC with the service's generated stub against a
real server, and checked against what Millrace's own client sees."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from millrace import StreamManager
from millrace.gateway.pravega.proto import controller_pb2 as pb
from millrace.gateway.pravega.proto.controller_pb2_grpc import ControllerServiceStub
from tests.server_process import ServerProcess, create_topic

SERVICE = "/io.pravega.controller.stream.api.grpc.v1.ControllerService"


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.pravega_controller_port}") as opened:
        yield opened


@pytest.fixture
def stub(channel: grpc.Channel) -> ControllerServiceStub:
    return ControllerServiceStub(channel)


def info(scope: str, stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream)


def segment(scope: str, stream: str, sid: int) -> pb.SegmentId:
    return pb.SegmentId(streamInfo=info(scope, stream), segmentId=sid)


def ranges(answer: pb.SegmentRanges) -> list[tuple[int, float, float]]:
    return [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in answer.segmentRanges]


def fixed_stream(stub: ControllerServiceStub, scope: str, stream: str, segments: int) -> None:
    stub.createScope(pb.ScopeInfo(scope=scope))
    status = stub.createStream(pb.StreamConfig(streamInfo=info(scope, stream), scalingPolicy=pb.ScalingPolicy(
        scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=segments)))
    assert status.status == pb.CreateStreamStatus.SUCCESS


def test_segment_ids_are_pravegas_across_a_scale(stub: ControllerServiceStub, millrace_sm: StreamManager) -> None:
    fixed_stream(stub, "segs", "s", 2)
    current = ranges(stub.getCurrentSegments(info("segs", "s")))
    assert current == [(0, 0.0, 0.5), (1, 0.5, 1.0)]
    assert current == [(s.segment.segment_id, s.segment.key_start, s.segment.key_end)
                       for s in millrace_sm.describe_stream("segs", "s").segments]

    first = millrace_sm.describe_stream("segs", "s").segments[0].segment
    millrace_sm.split_segment("segs", "s", first, 2)
    # Segment 2 and 3 of epoch 1: (epoch << 32) | number, as Pravega numbers them.
    epoch1 = [((1 << 32) | 2, 0.0, 0.25), ((1 << 32) | 3, 0.25, 0.5), (1, 0.5, 1.0)]
    assert ranges(stub.getCurrentSegments(info("segs", "s"))) == epoch1
    assert ranges(stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info("segs", "s"), epoch=0))) == current
    assert ranges(stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info("segs", "s"), epoch=1))) == epoch1

    for method in (stub.getSegmentsImmediatelyFollowing, stub.getSegmentsImmediatlyFollowing):
        successors = method(segment("segs", "s", 0))
        assert sorted((e.segment.segmentId.segmentId, list(e.value)) for e in successors.segments) == [
            ((1 << 32) | 2, [0]), ((1 << 32) | 3, [0])]
    assert list(stub.getSegmentsImmediatelyFollowing(segment("segs", "s", 1)).segments) == []  # still open

    assert not stub.isSegmentValid(segment("segs", "s", 0)).response  # sealed by the scale
    assert stub.isSegmentValid(segment("segs", "s", (1 << 32) | 2)).response
    with pytest.raises(grpc.RpcError) as missing:
        stub.getSegmentsImmediatelyFollowing(segment("segs", "s", 7))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_cuts_truncation_and_the_head(stub: ControllerServiceStub, millrace_sm: StreamManager) -> None:
    stub.createScope(pb.ScopeInfo(scope="cuts"))
    millrace_sm.create_byte_stream("cuts", "bytes")
    with millrace_sm.create_byte_writer("cuts", "bytes") as writer:
        writer.write(b"x" * 100)
        writer.flush()
    head = stub.getSegments(pb.GetSegmentsRequest(streamInfo=info("cuts", "bytes"), timestamp=0))
    assert [(s.segmentId.segmentId, s.offset) for s in head.segments] == [(0, 0)]

    def cut(positions: dict[int, int]) -> pb.StreamCut:
        return pb.StreamCut(streamInfo=info("cuts", "bytes"), cut=positions)

    assert stub.isStreamCutValid(cut({0: 40})).response
    assert not stub.isStreamCutValid(cut({0: 101})).response  # past the segment's end
    assert not stub.isStreamCutValid(cut({5: 0})).response  # no such segment
    assert stub.truncateStream(cut({0: 40})).status == pb.UpdateStreamStatus.SUCCESS
    assert millrace_sm.describe_stream("cuts", "bytes").truncation == {0: 40}
    head = stub.getSegments(pb.GetSegmentsRequest(streamInfo=info("cuts", "bytes"), timestamp=0))
    assert [(s.segmentId.segmentId, s.offset) for s in head.segments] == [(0, 40)]
    with pytest.raises(grpc.RpcError) as backwards:
        stub.truncateStream(cut({0: 10}))
    assert backwards.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.truncateStream(pb.StreamCut(streamInfo=info("cuts", "missing"), cut={0: 0})).status == (
        pb.UpdateStreamStatus.STREAM_NOT_FOUND)


def test_a_kafka_topic_is_not_cut_at_byte_positions(server: ServerProcess, stub: ControllerServiceStub) -> None:
    create_topic(server, "ledger", 1)
    with pytest.raises(grpc.RpcError) as refused:
        stub.truncateStream(pb.StreamCut(streamInfo=info("kafka", "ledger"), cut={0: 0}))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "DeleteRecords" in (refused.value.details() or "")


def test_configuration_round_trip(stub: ControllerServiceStub) -> None:
    stub.createScope(pb.ScopeInfo(scope="configs"))
    sent = pb.StreamConfig(
        streamInfo=info("configs", "s"),
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC, targetRate=10,
                                       scaleFactor=2, minNumSegments=3),
        retentionPolicy=pb.RetentionPolicy(retentionType=pb.RetentionPolicy.TIME, retentionParam=5000,
                                           retentionMax=(1 << 63) - 1),
        tags=pb.Tags(tag=["a"]))
    assert stub.createStream(sent).status == pb.CreateStreamStatus.SUCCESS
    assert stub.getStreamConfiguration(info("configs", "s")) == sent
    assert stub.checkStreamExists(info("configs", "s")).exists
    assert not stub.checkStreamExists(info("configs", "nope")).exists
    assert stub.checkScopeExists(pb.ScopeInfo(scope="configs")).exists

    retention_max_below = pb.StreamConfig(streamInfo=info("configs", "t"), retentionPolicy=pb.RetentionPolicy(
        retentionType=pb.RetentionPolicy.SIZE, retentionParam=100, retentionMax=50))
    with pytest.raises(grpc.RpcError) as refused:
        stub.createStream(retention_max_below)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as missing:
        stub.getStreamConfiguration(info("configs", "nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_lists_page_with_a_continuation_token(stub: ControllerServiceStub) -> None:
    stub.createScope(pb.ScopeInfo(scope="paged"))
    for name in ("b", "a", "c"):
        fixed_stream(stub, "paged", name, 1)
    first = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="paged")))
    assert [s.stream for s in first.streams] == ["a", "b", "c"]
    after = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="paged"),
                                                             continuationToken=first.continuationToken))
    assert list(after.streams) == []  # the end: Pravega's clients stop at an empty page
    missing = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="no-scope")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND
    scopes = stub.listScopes(pb.ScopesRequest())
    assert "paged" in scopes.scopes and scopes.continuationToken.token == max(scopes.scopes)


def test_endpoints_and_tokens(server: ServerProcess, stub: ControllerServiceStub) -> None:
    assert stub.getURI(segment("any", "stream", 0)) == pb.NodeUri(endpoint="127.0.0.1",
                                                                       port=server.pravega_segment_port)
    assert stub.getControllerServerList(pb.ServerRequest()).nodeURI == [
        pb.NodeUri(endpoint="127.0.0.1", port=server.pravega_controller_port)]
    assert stub.getDelegationToken(info("any", "stream")).delegationToken == ""  # security is off


def test_a_method_not_served_is_unimplemented(channel: grpc.Channel) -> None:
    create_transaction = channel.unary_unary(f"{SERVICE}/createTransaction")
    with pytest.raises(grpc.RpcError) as unserved:
        create_transaction(b"")
    assert unserved.value.code() == grpc.StatusCode.UNIMPLEMENTED
