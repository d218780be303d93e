"""Pravega's controller gRPC service over Millrace's controller and stream layer.

Pravega's clients (the Java client, the Rust client and its Python binding ``pravega_client``) manage
scopes and streams through this service unchanged. It is an adapter, as the Kafka and native listeners
are: every call reaches the same ``Controller`` (store/controller/) and passes the same stream-layer
rules (``SegmentGate``: a Kafka topic is never sealed nor cut at byte positions, a stream of the Kafka
scope is made only as a topic, names starting with '_' are Millrace's own); there is no second store.

What Pravega's controller answers, this answers: an outcome its response has a status for is that status
(``CreateScopeStatus.SCOPE_EXISTS``, ``DeleteStreamStatus.STREAM_NOT_SEALED``...); any other failure is a
gRPC error with the code Pravega's controller gives it (NOT_FOUND for a missing stream, PERMISSION_DENIED
for an operation the stream does not allow, FAILED_PRECONDITION for a lost conditional update) or
INVALID_ARGUMENT for a request Millrace refuses, with the reason as its description. A method not
declared in ``proto/controller.proto`` is answered UNIMPLEMENTED by gRPC itself.

Mapping. Segment ids are the same numbers in both: ``(epoch << 32) | number``, and segment names
``scope/stream/<number>.#epoch.<epoch>``. Pravega's scaling policy becomes a ``ScalingPolicy`` (its
``minNumSegments`` is also the stream's initial segment count, as in Pravega); a fixed policy of N
segments is a stream of N segments that never scales. Retention by time or size keeps about
``retentionParam`` (milliseconds or bytes), which also satisfies any ``retentionMax`` not below it.
``timestampAggregationTimeout`` and ``rolloverSizeBytes`` are tuning hints Millrace has no use for.

Threads: gRPC calls each method on one of its own server threads, never on the Twisted reactor; the
controller and the gate block there on table-segment I/O, as they block on the native listener's
worker pool.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from typing import NoReturn, TypeVar

import grpc

from millrace.gateway.pravega.proto import controller_pb2 as pb
from millrace.gateway.pravega.proto import controller_pb2_grpc as pb_grpc
from millrace.protocol.errors import (
    FormatViolationError,
    InvalidRequestError,
    InvalidStreamCutError,
    ScaleConflictError,
)
from millrace.store.controller import (
    Controller,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRange,
    StreamConfiguration,
    StreamNotSealedError,
    StreamSealedError,
    segment_epoch,
    segment_name,
)
from millrace.store.controller.names import validate_name
from millrace.store.controller.subscribers import Subscribers
from millrace.store.errors import (
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    StreamExistsError,
    StreamNotFoundError,
    TableKeyNotFoundError,
    TableKeyVersionMismatchError,
)
from millrace.streams.segment_gate import SegmentGate

log = logging.getLogger("millrace.pravega")

T = TypeVar("T")

# Names a list answers at most at once; the client asks again with the continuation token (the last
# name answered) until an answer is empty.
LIST_PAGE = 1000
# Pravega's retentionMax when a client sets none (Java's Long.MAX_VALUE).
NO_RETENTION_MAX = (1 << 63) - 1

_SCALING_TO_MILLRACE = {
    pb.ScalingPolicy.FIXED_NUM_SEGMENTS: ScalingType.FIXED_NUM_SEGMENTS,
    pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC: ScalingType.BY_RATE_IN_KBYTES_PER_SEC,
    pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC: ScalingType.BY_RATE_IN_EVENTS_PER_SEC,
}
_SCALING_TO_PRAVEGA = {millrace: pravega for pravega, millrace in _SCALING_TO_MILLRACE.items()}
_RETENTION_TO_MILLRACE = {
    pb.RetentionPolicy.UNKNOWN: RetentionType.NONE,  # what Pravega's clients send for "no retention"
    pb.RetentionPolicy.TIME: RetentionType.TIME,
    pb.RetentionPolicy.SIZE: RetentionType.SIZE,
}

Address = tuple[str, int]


class RequestRefused(Exception):
    """A request answered with a gRPC error code of its own (not one of ``_CODES``)."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


# Millrace's errors as the gRPC codes Pravega's controller answers them with, most specific first
# (FormatViolationError and InvalidRequestError are ValueErrors too).
_CODES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], grpc.StatusCode], ...] = (
    ((StreamNotFoundError, ScopeNotFoundError, SegmentNotFoundError), grpc.StatusCode.NOT_FOUND),
    (FormatViolationError, grpc.StatusCode.PERMISSION_DENIED),  # Pravega's "operation not allowed"
    ((TableKeyVersionMismatchError, TableKeyNotFoundError, ScaleConflictError), grpc.StatusCode.FAILED_PRECONDITION),
    ((InvalidRequestError, InvalidStreamCutError, ValueError), grpc.StatusCode.INVALID_ARGUMENT),
)


def stream_configuration(config: pb.StreamConfig, initial_segments: int | None = None) -> StreamConfiguration:
    """Millrace's configuration of a Pravega ``StreamConfig`` (ValueError for one Millrace cannot keep).
    ``initial_segments``: the stream's own, for an update (epoch 0 is history; an update does not
    rescale); None takes ``minNumSegments``, as Pravega creates a stream with its minimum."""
    scaling = config.scalingPolicy if config.HasField("scalingPolicy") else pb.ScalingPolicy(minNumSegments=1)
    kind = _SCALING_TO_MILLRACE.get(scaling.scaleType)
    if kind is None:
        raise ValueError(f"unknown scaling policy type {scaling.scaleType}")
    if scaling.minNumSegments < 1:
        raise ValueError(f"a stream has at least one segment, not minNumSegments={scaling.minNumSegments}")
    if kind is ScalingType.FIXED_NUM_SEGMENTS:
        policy = ScalingPolicy()  # as a fixed stream of the native client: its segment count is initial_segments
    else:
        if scaling.targetRate <= 0 or scaling.scaleFactor <= 0:
            raise ValueError(f"a rate policy needs a positive targetRate and scaleFactor, not {scaling.targetRate} "
                             f"and {scaling.scaleFactor}")
        policy = ScalingPolicy(kind, scaling.targetRate, scaling.scaleFactor, scaling.minNumSegments)
    retention = RetentionPolicy()
    if config.HasField("retentionPolicy"):
        r = config.retentionPolicy
        retention_type = _RETENTION_TO_MILLRACE.get(r.retentionType)
        if retention_type is None:
            raise ValueError(f"unknown retention policy type {r.retentionType}")
        if retention_type is not RetentionType.NONE:
            if r.retentionParam < 0:
                raise ValueError(f"negative retentionParam {r.retentionParam}")
            if 0 < r.retentionMax < r.retentionParam:
                raise ValueError(f"retentionMax {r.retentionMax} is below retentionParam {r.retentionParam}")
            retention = RetentionPolicy(retention_type, r.retentionParam)
    config_tags = tuple(config.tags.tag) if config.HasField("tags") else ()
    result = StreamConfiguration(
        initial_segments=scaling.minNumSegments if initial_segments is None else initial_segments,
        scaling=policy, retention=retention, tags=config_tags)
    result.validate()
    return result


def pravega_stream_config(scope: str, stream: str, config: StreamConfiguration) -> pb.StreamConfig:
    """The ``StreamConfig`` Pravega's controller would answer for ``config`` (RequestRefused UNIMPLEMENTED
    for retention by consumption, which Pravega's StreamConfig has no form for)."""
    s = config.scaling
    if s.type is ScalingType.FIXED_NUM_SEGMENTS:
        scaling = pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=config.initial_segments)
    else:
        scaling = pb.ScalingPolicy(scaleType=_SCALING_TO_PRAVEGA[s.type], targetRate=s.target_rate,
                                   scaleFactor=s.scale_factor, minNumSegments=s.min_segments)
    answer = pb.StreamConfig(streamInfo=pb.StreamInfo(scope=scope, stream=stream), scalingPolicy=scaling,
                             tags=pb.Tags(tag=list(config.tags)))
    r = config.retention
    if r.type is RetentionType.TIME:
        answer.retentionPolicy.CopyFrom(pb.RetentionPolicy(retentionType=pb.RetentionPolicy.TIME,
                                                           retentionParam=r.value, retentionMax=NO_RETENTION_MAX))
    elif r.type is RetentionType.SIZE:
        answer.retentionPolicy.CopyFrom(pb.RetentionPolicy(retentionType=pb.RetentionPolicy.SIZE,
                                                           retentionParam=r.value, retentionMax=NO_RETENTION_MAX))
    elif r.type is RetentionType.CONSUMPTION:
        raise RequestRefused(grpc.StatusCode.UNIMPLEMENTED,
                             f"{scope}/{stream} is retained by its subscribers' consumption, which Pravega's "
                             "StreamConfig cannot express: describe it with Millrace's own client")
    return answer


def _segment_range(r: SegmentRange) -> pb.SegmentRange:
    return pb.SegmentRange(segmentId=_segment_id(r.scope, r.stream, r.segment_id), minKey=r.key_start, maxKey=r.key_end)


def _segment_id(scope: str, stream: str, sid: int) -> pb.SegmentId:
    return pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=sid)


def _cut(request: pb.StreamCut) -> dict[int | str, int]:
    """A request's stream cut (segment id -> offset) as the controller takes one."""
    return {sid: offset for sid, offset in request.cut.items()}


def _page(names: Iterable[str], token: str) -> tuple[list[str], str]:
    """The names after ``token`` in order, at most ``LIST_PAGE`` of them, and the token to ask on with."""
    ordered = sorted(names)
    page = ordered[bisect.bisect_right(ordered, token):][:LIST_PAGE] if token else ordered[:LIST_PAGE]
    return page, page[-1] if page else token


class PravegaControllerService(pb_grpc.ControllerServiceServicer):
    """``gate``: the stream layer's rules every creation, seal and truncation passes. ``delete_stream``
    deletes a sealed stream (the gateway's, which also drops the partitions event writers gave it).
    ``controller_address``: where this service is reached (``getControllerServerList``);
    ``segment_store_address``: what ``getURI`` answers for every segment (one node serves them all)."""

    def __init__(self, controller: Controller, gate: SegmentGate, delete_stream: Callable[[str, str], None],
                 controller_address: Address, segment_store_address: Address) -> None:
        self.controller = controller
        self.gate = gate
        self.delete_segments = delete_stream
        self.subscribers = Subscribers(controller)
        self.controller_address = controller_address
        self.segment_store_address = segment_store_address

    # -- answering ---------------------------------------------------------------------------------
    def _answer(self, context: grpc.ServicerContext, method: str, call: Callable[[], T]) -> T:
        """``call()``'s answer, or its failure as the gRPC error Pravega's controller gives it."""
        try:
            return call()
        except RequestRefused as exc:
            self._abort(context, exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure becomes the caller's error status
            for types, code in _CODES:
                if isinstance(exc, types):
                    self._abort(context, code, str(exc) or type(exc).__name__)
            log.exception("Pravega controller call %s failed", method)
            self._abort(context, grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str) -> NoReturn:
        context.abort(code, reason)
        raise AssertionError("grpc's abort returned")  # it always raises

    def _stream_missing(self, scope: str) -> bool:
        """Whether a missing stream's scope is missing too (Pravega answers SCOPE_NOT_FOUND then)."""
        return not self.controller.scope_exists(scope)

    # -- the controller's own address --------------------------------------------------------------
    def getControllerServerList(self, request: pb.ServerRequest, context: grpc.ServicerContext) -> pb.ServerResponse:
        host, port = self.controller_address
        return pb.ServerResponse(nodeURI=[pb.NodeUri(endpoint=host, port=port)])

    # -- scopes ------------------------------------------------------------------------------------
    def createScope(self, request: pb.ScopeInfo, context: grpc.ServicerContext) -> pb.CreateScopeStatus:
        def create() -> pb.CreateScopeStatus:
            try:
                created = self.controller.create_scope(request.scope)
            except ValueError:  # an invalid or reserved name
                return pb.CreateScopeStatus(status=pb.CreateScopeStatus.INVALID_SCOPE_NAME)
            return pb.CreateScopeStatus(status=pb.CreateScopeStatus.SUCCESS if created
                                        else pb.CreateScopeStatus.SCOPE_EXISTS)
        return self._answer(context, "createScope", create)

    def checkScopeExists(self, request: pb.ScopeInfo, context: grpc.ServicerContext) -> pb.ExistsResponse:
        return self._answer(context, "checkScopeExists",
                            lambda: pb.ExistsResponse(exists=self.controller.scope_exists(request.scope)))

    def listScopes(self, request: pb.ScopesRequest, context: grpc.ServicerContext) -> pb.ScopesResponse:
        def scopes() -> pb.ScopesResponse:
            page, token = _page(self.controller.list_scopes(), request.continuationToken.token)
            return pb.ScopesResponse(scopes=page, continuationToken=pb.ContinuationToken(token=token))
        return self._answer(context, "listScopes", scopes)

    def deleteScope(self, request: pb.ScopeInfo, context: grpc.ServicerContext) -> pb.DeleteScopeStatus:
        def delete() -> pb.DeleteScopeStatus:
            try:
                self.controller.delete_scope(request.scope)
            except ScopeNotFoundError:
                return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_FOUND)
            except ScopeNotEmptyError:
                return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_EMPTY)
            return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SUCCESS)
        return self._answer(context, "deleteScope", delete)

    # -- streams -----------------------------------------------------------------------------------
    def createStream(self, request: pb.StreamConfig, context: grpc.ServicerContext) -> pb.CreateStreamStatus:
        scope, stream = request.streamInfo.scope, request.streamInfo.stream
        statuses = pb.CreateStreamStatus

        def create() -> pb.CreateStreamStatus:
            try:
                validate_name("stream", stream)
            except ValueError:
                return statuses(status=statuses.INVALID_STREAM_NAME)
            self.gate.check_create_stream(scope, stream)
            config = stream_configuration(request)
            try:
                self.controller.create_stream(scope, stream, config)
            except ScopeNotFoundError:
                return statuses(status=statuses.SCOPE_NOT_FOUND)
            except StreamExistsError:
                return statuses(status=statuses.STREAM_EXISTS)
            return statuses(status=statuses.SUCCESS)
        return self._answer(context, "createStream", create)

    def checkStreamExists(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.ExistsResponse:
        return self._answer(context, "checkStreamExists", lambda: pb.ExistsResponse(
            exists=self.controller.stream_exists(request.scope, request.stream)))

    def getStreamConfiguration(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.StreamConfig:
        return self._answer(context, "getStreamConfiguration", lambda: pravega_stream_config(
            request.scope, request.stream, self.controller.get_stream(request.scope, request.stream).config))

    def updateStream(self, request: pb.StreamConfig, context: grpc.ServicerContext) -> pb.UpdateStreamStatus:
        scope, stream = request.streamInfo.scope, request.streamInfo.stream
        statuses = pb.UpdateStreamStatus

        def update() -> pb.UpdateStreamStatus:
            try:
                info = self.controller.get_stream(scope, stream)
                # Conditional on the record read: a concurrent change fails this update (FAILED_PRECONDITION,
                # which the client retries) rather than being overwritten with a stale initial count.
                self.controller.update_stream(scope, stream, stream_configuration(request, info.config.initial_segments),
                                              expected_version=info.version)
            except StreamNotFoundError:
                return statuses(status=statuses.SCOPE_NOT_FOUND if self._stream_missing(scope)
                                else statuses.STREAM_NOT_FOUND)
            except StreamSealedError:
                return statuses(status=statuses.STREAM_SEALED)
            return statuses(status=statuses.SUCCESS)
        return self._answer(context, "updateStream", update)

    def _streams(self, scope: str, token: str, tag: str | None) -> pb.StreamsInScopeResponse:
        try:
            names = self.controller.list_streams(scope, tag)
        except ScopeNotFoundError:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        page, next_token = _page(names, token)
        return pb.StreamsInScopeResponse(streams=[pb.StreamInfo(scope=scope, stream=name) for name in page],
                                         continuationToken=pb.ContinuationToken(token=next_token),
                                         status=pb.StreamsInScopeResponse.SUCCESS)

    def listStreamsInScope(self, request: pb.StreamsInScopeRequest,
                           context: grpc.ServicerContext) -> pb.StreamsInScopeResponse:
        return self._answer(context, "listStreamsInScope", lambda: self._streams(
            request.scope.scope, request.continuationToken.token, None))

    def listStreamsInScopeForTag(self, request: pb.StreamsInScopeWithTagRequest,
                                 context: grpc.ServicerContext) -> pb.StreamsInScopeResponse:
        return self._answer(context, "listStreamsInScopeForTag", lambda: self._streams(
            request.scope.scope, request.continuationToken.token, request.tag))

    def sealStream(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.UpdateStreamStatus:
        statuses = pb.UpdateStreamStatus

        def seal() -> pb.UpdateStreamStatus:
            try:
                self.controller.get_stream(request.scope, request.stream)
            except StreamNotFoundError:
                return statuses(status=statuses.SCOPE_NOT_FOUND if self._stream_missing(request.scope)
                                else statuses.STREAM_NOT_FOUND)
            self.gate.check_seal_stream(request.scope, request.stream)
            try:
                self.controller.seal_stream(request.scope, request.stream)
            except StreamNotFoundError:  # deleted meanwhile
                return statuses(status=statuses.STREAM_NOT_FOUND)
            return statuses(status=statuses.SUCCESS)
        return self._answer(context, "sealStream", seal)

    def deleteStream(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.DeleteStreamStatus:
        statuses = pb.DeleteStreamStatus

        def delete() -> pb.DeleteStreamStatus:
            try:
                self.delete_segments(request.scope, request.stream)
            except StreamNotFoundError:
                return statuses(status=statuses.STREAM_NOT_FOUND)
            except StreamNotSealedError:
                return statuses(status=statuses.STREAM_NOT_SEALED)
            # As the native DELETE_STREAM: a stream re-created under the name starts without subscribers.
            self.subscribers.forget_stream(request.scope, request.stream)
            return statuses(status=statuses.SUCCESS)
        return self._answer(context, "deleteStream", delete)

    def truncateStream(self, request: pb.StreamCut, context: grpc.ServicerContext) -> pb.UpdateStreamStatus:
        scope, stream = request.streamInfo.scope, request.streamInfo.stream
        statuses = pb.UpdateStreamStatus

        def truncate() -> pb.UpdateStreamStatus:
            try:
                self.controller.get_stream(scope, stream)
                self.gate.check_truncate_stream(scope, stream, {segment_name(scope, stream, sid): offset
                                                                for sid, offset in request.cut.items()})
                self.controller.truncate_stream(scope, stream, _cut(request))
            except StreamNotFoundError:
                return statuses(status=statuses.SCOPE_NOT_FOUND if self._stream_missing(scope)
                                else statuses.STREAM_NOT_FOUND)
            return statuses(status=statuses.SUCCESS)
        return self._answer(context, "truncateStream", truncate)

    # -- segments ----------------------------------------------------------------------------------
    def getCurrentSegments(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.SegmentRanges:
        """The segments of the current epoch (of a sealed stream: its last ones, as Pravega answers)."""
        return self._answer(context, "getCurrentSegments", lambda: pb.SegmentRanges(segmentRanges=[
            _segment_range(r) for r in self.controller.get_current_segments(request.scope, request.stream)]))

    def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, context: grpc.ServicerContext) -> pb.SegmentRanges:
        scope, stream = request.streamInfo.scope, request.streamInfo.stream

        def epoch_segments() -> pb.SegmentRanges:
            current = self.controller.get_stream(scope, stream).current_epoch
            if not 0 <= request.epoch <= current:
                raise ValueError(f"{scope}/{stream} has epochs 0..{current}, not {request.epoch}")
            epoch = self.controller.get_epoch(scope, stream, request.epoch)
            return pb.SegmentRanges(segmentRanges=[_segment_range(r) for r in epoch.ranges(scope, stream)])
        return self._answer(context, "getEpochSegments", epoch_segments)

    def getSegments(self, request: pb.GetSegmentsRequest, context: grpc.ServicerContext) -> pb.SegmentsAtTime:
        scope, stream = request.streamInfo.scope, request.streamInfo.stream

        def at_time() -> pb.SegmentsAtTime:
            cut = self._cut_at(scope, stream, request.timestamp)
            return pb.SegmentsAtTime(segments=[
                pb.SegmentsAtTime.SegmentLocation(segmentId=_segment_id(scope, stream, sid), offset=offset)
                for sid, offset in sorted(cut.items())])
        return self._answer(context, "getSegments", at_time)

    def _cut_at(self, scope: str, stream: str, timestamp: int) -> dict[int, int]:
        """The stream cut at ``timestamp`` (milliseconds): the start of the epoch in effect then (segments
        carry no per-event times, so a time cut has epoch granularity), but never before the stream's
        head, which a time before it (0 asks for the head) answers."""
        info = self.controller.get_stream(scope, stream)
        history = self.controller.get_epoch_history(scope, stream)
        head = dict(info.truncation) or {sid: 0 for sid, _, _ in history[0].segments}
        in_effect = [e for e in history if e.created_ms <= timestamp]
        if not in_effect:
            return head
        epoch = in_effect[-1]
        ranges = {r.segment_id: r for e in history for r in e.ranges(scope, stream)}
        at_time = {sid: head.get(sid, 0) for sid, _, _ in epoch.segments}
        # A segment of that epoch overlapping a later-created head segment lies before the head.
        if any(ranges[sid].overlaps(ranges[h]) and segment_epoch(sid) < segment_epoch(h)
               for sid in at_time for h in head if h in ranges):
            return head
        return at_time

    def getSegmentsImmediatlyFollowing(self, request: pb.SegmentId,
                                       context: grpc.ServicerContext) -> pb.SuccessorResponse:
        return self.getSegmentsImmediatelyFollowing(request, context)

    def getSegmentsImmediatelyFollowing(self, request: pb.SegmentId,
                                        context: grpc.ServicerContext) -> pb.SuccessorResponse:
        """The segments that replaced one sealed by a scale, each with every segment it replaced."""
        scope, stream = request.streamInfo.scope, request.streamInfo.stream

        def successors() -> pb.SuccessorResponse:
            entries = []
            for successor in self.controller.get_successors(scope, stream, request.segmentId):
                predecessors = self.controller.get_predecessors(scope, stream, successor.segment_id)
                entries.append(pb.SuccessorResponse.SegmentEntry(
                    segment=_segment_range(successor), value=[p.segment_id for p in predecessors]))
            return pb.SuccessorResponse(segments=entries)
        return self._answer(context, "getSegmentsImmediatelyFollowing", successors)

    def getURI(self, request: pb.SegmentId, context: grpc.ServicerContext) -> pb.NodeUri:
        """Where the segment is served: one node serves every segment."""
        host, port = self.segment_store_address
        return pb.NodeUri(endpoint=host, port=port)

    def isSegmentValid(self, request: pb.SegmentId, context: grpc.ServicerContext) -> pb.SegmentValidityResponse:
        """Whether the segment is one of the stream's current ones, as Pravega's controller answers."""
        scope, stream = request.streamInfo.scope, request.streamInfo.stream
        return self._answer(context, "isSegmentValid", lambda: pb.SegmentValidityResponse(response=any(
            r.segment_id == request.segmentId for r in self.controller.get_current_segments(scope, stream))))

    def isStreamCutValid(self, request: pb.StreamCut, context: grpc.ServicerContext) -> pb.StreamCutValidityResponse:
        """Whether a truncation would take the cut: its segments cover the key space once, each still
        there and each offset within it."""
        scope, stream = request.streamInfo.scope, request.streamInfo.stream

        def valid() -> pb.StreamCutValidityResponse:
            try:
                self.controller.check_stream_cut(scope, stream, _cut(request))
            except InvalidStreamCutError:
                return pb.StreamCutValidityResponse(response=False)
            return pb.StreamCutValidityResponse(response=True)
        return self._answer(context, "isStreamCutValid", valid)

    def getDelegationToken(self, request: pb.StreamInfo, context: grpc.ServicerContext) -> pb.DelegationToken:
        """An empty token: this listener does not authenticate (``assembly`` refuses it on a secured
        server), so there is nothing for the segment store to check."""
        return pb.DelegationToken(delegationToken="")

