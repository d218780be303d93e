from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerResponse(_message.Message):
    __slots__ = ("nodeURI",)
    NODEURI_FIELD_NUMBER: _ClassVar[int]
    nodeURI: _containers.RepeatedCompositeFieldContainer[NodeUri]
    def __init__(self, nodeURI: _Optional[_Iterable[_Union[NodeUri, _Mapping]]] = ...) -> None: ...

class ScopeInfo(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    def __init__(self, scope: _Optional[str] = ...) -> None: ...

class ContinuationToken(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class ExistsResponse(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: _Optional[bool] = ...) -> None: ...

class ScopesRequest(_message.Message):
    __slots__ = ("continuationToken",)
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    continuationToken: ContinuationToken
    def __init__(self, continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class ScopesResponse(_message.Message):
    __slots__ = ("scopes", "continuationToken")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    continuationToken: ContinuationToken
    def __init__(self, scopes: _Optional[_Iterable[str]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class CreateScopeStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateScopeStatus.Status]
        FAILURE: _ClassVar[CreateScopeStatus.Status]
        SCOPE_EXISTS: _ClassVar[CreateScopeStatus.Status]
        INVALID_SCOPE_NAME: _ClassVar[CreateScopeStatus.Status]
    SUCCESS: CreateScopeStatus.Status
    FAILURE: CreateScopeStatus.Status
    SCOPE_EXISTS: CreateScopeStatus.Status
    INVALID_SCOPE_NAME: CreateScopeStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: CreateScopeStatus.Status
    def __init__(self, status: _Optional[_Union[CreateScopeStatus.Status, str]] = ...) -> None: ...

class DeleteScopeStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteScopeStatus.Status]
        FAILURE: _ClassVar[DeleteScopeStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[DeleteScopeStatus.Status]
        SCOPE_NOT_EMPTY: _ClassVar[DeleteScopeStatus.Status]
    SUCCESS: DeleteScopeStatus.Status
    FAILURE: DeleteScopeStatus.Status
    SCOPE_NOT_FOUND: DeleteScopeStatus.Status
    SCOPE_NOT_EMPTY: DeleteScopeStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteScopeStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteScopeStatus.Status, str]] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("scope", "stream", "accessOperation")
    class AccessOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[StreamInfo.AccessOperation]
        NONE: _ClassVar[StreamInfo.AccessOperation]
        ANY: _ClassVar[StreamInfo.AccessOperation]
        READ: _ClassVar[StreamInfo.AccessOperation]
        WRITE: _ClassVar[StreamInfo.AccessOperation]
        READ_WRITE: _ClassVar[StreamInfo.AccessOperation]
    UNSPECIFIED: StreamInfo.AccessOperation
    NONE: StreamInfo.AccessOperation
    ANY: StreamInfo.AccessOperation
    READ: StreamInfo.AccessOperation
    WRITE: StreamInfo.AccessOperation
    READ_WRITE: StreamInfo.AccessOperation
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    ACCESSOPERATION_FIELD_NUMBER: _ClassVar[int]
    scope: str
    stream: str
    accessOperation: StreamInfo.AccessOperation
    def __init__(self, scope: _Optional[str] = ..., stream: _Optional[str] = ..., accessOperation: _Optional[_Union[StreamInfo.AccessOperation, str]] = ...) -> None: ...

class ScalingPolicy(_message.Message):
    __slots__ = ("scaleType", "targetRate", "scaleFactor", "minNumSegments")
    class ScalingPolicyType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FIXED_NUM_SEGMENTS: _ClassVar[ScalingPolicy.ScalingPolicyType]
        BY_RATE_IN_KBYTES_PER_SEC: _ClassVar[ScalingPolicy.ScalingPolicyType]
        BY_RATE_IN_EVENTS_PER_SEC: _ClassVar[ScalingPolicy.ScalingPolicyType]
    FIXED_NUM_SEGMENTS: ScalingPolicy.ScalingPolicyType
    BY_RATE_IN_KBYTES_PER_SEC: ScalingPolicy.ScalingPolicyType
    BY_RATE_IN_EVENTS_PER_SEC: ScalingPolicy.ScalingPolicyType
    SCALETYPE_FIELD_NUMBER: _ClassVar[int]
    TARGETRATE_FIELD_NUMBER: _ClassVar[int]
    SCALEFACTOR_FIELD_NUMBER: _ClassVar[int]
    MINNUMSEGMENTS_FIELD_NUMBER: _ClassVar[int]
    scaleType: ScalingPolicy.ScalingPolicyType
    targetRate: int
    scaleFactor: int
    minNumSegments: int
    def __init__(self, scaleType: _Optional[_Union[ScalingPolicy.ScalingPolicyType, str]] = ..., targetRate: _Optional[int] = ..., scaleFactor: _Optional[int] = ..., minNumSegments: _Optional[int] = ...) -> None: ...

class RetentionPolicy(_message.Message):
    __slots__ = ("retentionType", "retentionParam", "retentionMax")
    class RetentionPolicyType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[RetentionPolicy.RetentionPolicyType]
        TIME: _ClassVar[RetentionPolicy.RetentionPolicyType]
        SIZE: _ClassVar[RetentionPolicy.RetentionPolicyType]
    UNKNOWN: RetentionPolicy.RetentionPolicyType
    TIME: RetentionPolicy.RetentionPolicyType
    SIZE: RetentionPolicy.RetentionPolicyType
    RETENTIONTYPE_FIELD_NUMBER: _ClassVar[int]
    RETENTIONPARAM_FIELD_NUMBER: _ClassVar[int]
    RETENTIONMAX_FIELD_NUMBER: _ClassVar[int]
    retentionType: RetentionPolicy.RetentionPolicyType
    retentionParam: int
    retentionMax: int
    def __init__(self, retentionType: _Optional[_Union[RetentionPolicy.RetentionPolicyType, str]] = ..., retentionParam: _Optional[int] = ..., retentionMax: _Optional[int] = ...) -> None: ...

class Tags(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tag: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamConfig(_message.Message):
    __slots__ = ("streamInfo", "scalingPolicy", "retentionPolicy", "tags", "timestampAggregationTimeout", "rolloverSizeBytes")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    SCALINGPOLICY_FIELD_NUMBER: _ClassVar[int]
    RETENTIONPOLICY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPAGGREGATIONTIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ROLLOVERSIZEBYTES_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    scalingPolicy: ScalingPolicy
    retentionPolicy: RetentionPolicy
    tags: Tags
    timestampAggregationTimeout: int
    rolloverSizeBytes: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., scalingPolicy: _Optional[_Union[ScalingPolicy, _Mapping]] = ..., retentionPolicy: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., tags: _Optional[_Union[Tags, _Mapping]] = ..., timestampAggregationTimeout: _Optional[int] = ..., rolloverSizeBytes: _Optional[int] = ...) -> None: ...

class CreateStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateStreamStatus.Status]
        FAILURE: _ClassVar[CreateStreamStatus.Status]
        STREAM_EXISTS: _ClassVar[CreateStreamStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[CreateStreamStatus.Status]
        INVALID_STREAM_NAME: _ClassVar[CreateStreamStatus.Status]
    SUCCESS: CreateStreamStatus.Status
    FAILURE: CreateStreamStatus.Status
    STREAM_EXISTS: CreateStreamStatus.Status
    SCOPE_NOT_FOUND: CreateStreamStatus.Status
    INVALID_STREAM_NAME: CreateStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: CreateStreamStatus.Status
    def __init__(self, status: _Optional[_Union[CreateStreamStatus.Status, str]] = ...) -> None: ...

class UpdateStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[UpdateStreamStatus.Status]
        FAILURE: _ClassVar[UpdateStreamStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[UpdateStreamStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[UpdateStreamStatus.Status]
        STREAM_SEALED: _ClassVar[UpdateStreamStatus.Status]
    SUCCESS: UpdateStreamStatus.Status
    FAILURE: UpdateStreamStatus.Status
    STREAM_NOT_FOUND: UpdateStreamStatus.Status
    SCOPE_NOT_FOUND: UpdateStreamStatus.Status
    STREAM_SEALED: UpdateStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: UpdateStreamStatus.Status
    def __init__(self, status: _Optional[_Union[UpdateStreamStatus.Status, str]] = ...) -> None: ...

class DeleteStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteStreamStatus.Status]
        FAILURE: _ClassVar[DeleteStreamStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[DeleteStreamStatus.Status]
        STREAM_NOT_SEALED: _ClassVar[DeleteStreamStatus.Status]
    SUCCESS: DeleteStreamStatus.Status
    FAILURE: DeleteStreamStatus.Status
    STREAM_NOT_FOUND: DeleteStreamStatus.Status
    STREAM_NOT_SEALED: DeleteStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteStreamStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteStreamStatus.Status, str]] = ...) -> None: ...

class StreamsInScopeRequest(_message.Message):
    __slots__ = ("scope", "continuationToken")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: ScopeInfo
    continuationToken: ContinuationToken
    def __init__(self, scope: _Optional[_Union[ScopeInfo, _Mapping]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class StreamsInScopeWithTagRequest(_message.Message):
    __slots__ = ("scope", "tag", "continuationToken")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: ScopeInfo
    tag: str
    continuationToken: ContinuationToken
    def __init__(self, scope: _Optional[_Union[ScopeInfo, _Mapping]] = ..., tag: _Optional[str] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class StreamsInScopeResponse(_message.Message):
    __slots__ = ("streams", "continuationToken", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[StreamsInScopeResponse.Status]
        FAILURE: _ClassVar[StreamsInScopeResponse.Status]
        SCOPE_NOT_FOUND: _ClassVar[StreamsInScopeResponse.Status]
    SUCCESS: StreamsInScopeResponse.Status
    FAILURE: StreamsInScopeResponse.Status
    SCOPE_NOT_FOUND: StreamsInScopeResponse.Status
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    continuationToken: ContinuationToken
    status: StreamsInScopeResponse.Status
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ..., status: _Optional[_Union[StreamsInScopeResponse.Status, str]] = ...) -> None: ...

class StreamCut(_message.Message):
    __slots__ = ("streamInfo", "cut")
    class CutEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    CUT_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    cut: _containers.ScalarMap[int, int]
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., cut: _Optional[_Mapping[int, int]] = ...) -> None: ...

class SegmentId(_message.Message):
    __slots__ = ("streamInfo", "segmentId")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    SEGMENTID_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    segmentId: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., segmentId: _Optional[int] = ...) -> None: ...

class SegmentRange(_message.Message):
    __slots__ = ("segmentId", "minKey", "maxKey")
    SEGMENTID_FIELD_NUMBER: _ClassVar[int]
    MINKEY_FIELD_NUMBER: _ClassVar[int]
    MAXKEY_FIELD_NUMBER: _ClassVar[int]
    segmentId: SegmentId
    minKey: float
    maxKey: float
    def __init__(self, segmentId: _Optional[_Union[SegmentId, _Mapping]] = ..., minKey: _Optional[float] = ..., maxKey: _Optional[float] = ...) -> None: ...

class SegmentRanges(_message.Message):
    __slots__ = ("segmentRanges", "delegationToken")
    SEGMENTRANGES_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segmentRanges: _containers.RepeatedCompositeFieldContainer[SegmentRange]
    delegationToken: str
    def __init__(self, segmentRanges: _Optional[_Iterable[_Union[SegmentRange, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class GetEpochSegmentsRequest(_message.Message):
    __slots__ = ("streamInfo", "epoch")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    epoch: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class GetSegmentsRequest(_message.Message):
    __slots__ = ("streamInfo", "timestamp")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    timestamp: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SegmentsAtTime(_message.Message):
    __slots__ = ("segments", "delegationToken")
    class SegmentLocation(_message.Message):
        __slots__ = ("segmentId", "offset")
        SEGMENTID_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        segmentId: SegmentId
        offset: int
        def __init__(self, segmentId: _Optional[_Union[SegmentId, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SegmentsAtTime.SegmentLocation]
    delegationToken: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SegmentsAtTime.SegmentLocation, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class SuccessorResponse(_message.Message):
    __slots__ = ("segments", "delegationToken")
    class SegmentEntry(_message.Message):
        __slots__ = ("segment", "value")
        SEGMENT_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        segment: SegmentRange
        value: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, segment: _Optional[_Union[SegmentRange, _Mapping]] = ..., value: _Optional[_Iterable[int]] = ...) -> None: ...
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SuccessorResponse.SegmentEntry]
    delegationToken: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SuccessorResponse.SegmentEntry, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class NodeUri(_message.Message):
    __slots__ = ("endpoint", "port")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    port: int
    def __init__(self, endpoint: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class SegmentValidityResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bool
    def __init__(self, response: _Optional[bool] = ...) -> None: ...

class StreamCutValidityResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bool
    def __init__(self, response: _Optional[bool] = ...) -> None: ...

class DelegationToken(_message.Message):
    __slots__ = ("delegationToken",)
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    delegationToken: str
    def __init__(self, delegationToken: _Optional[str] = ...) -> None: ...
