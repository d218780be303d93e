"""Millrace: durable, elastic stream storage in the spirit of Pravega, speaking the Kafka wire protocol.

One import namespace for everything Millrace installs. The source tree keeps its places at the top
(``gateway/``, ``streams/``, ``store/``, ``client/``, ``protocol/``) and this folder links to each, so they are
``millrace.gateway``, ``millrace.store``, ... on disk as installed; installing Millrace never adds generic top-level names
such as ``store`` or ``client`` that would clash with a user's own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public client API, loaded on first use (PEP 562): ``from millrace import StreamManager`` works,
# while the server, which imports ``millrace.store`` and ``millrace.gateway``, never loads the client.
_EXPORTS: dict[str, str] = {
    "StreamManager": "millrace.client.manager",
    "StreamConfiguration": "millrace.client.streams",
    "ScalingPolicy": "millrace.client.streams",
    "ScalingType": "millrace.client.streams",
    "RetentionPolicy": "millrace.client.streams",
    "RetentionType": "millrace.client.streams",
    "StreamCut": "millrace.client.streams",
    "StreamDescription": "millrace.client.streams",
    "Segment": "millrace.client.streams",
    "KeyValueTable": "millrace.client.kvtable",
    "TableEntry": "millrace.client.kvtable",
    "Put": "millrace.client.kvtable",
    "Insert": "millrace.client.kvtable",
    "Remove": "millrace.client.kvtable",
    "EventStreamWriter": "millrace.client.writer",
    "EventPosition": "millrace.client.writer",
    "TransactionalEventStreamWriter": "millrace.client.transactions",
    "Transaction": "millrace.client.transactions",
    "TxnStatus": "millrace.client.transactions",
    "TxnFailedError": "millrace.protocol.errors",
    "TxnNotFoundError": "millrace.protocol.errors",
    "StateSynchronizer": "millrace.client.synchronizer",
    "Updates": "millrace.client.synchronizer",
    "StateNotInitializedError": "millrace.client.synchronizer",
    "StateCorruptError": "millrace.client.synchronizer",
    "BatchClient": "millrace.client.batch",
    "BatchEvent": "millrace.client.batch",
    "SegmentRange": "millrace.client.batch",
    "ByteStreamWriter": "millrace.client.byte_stream",
    "ByteStreamReader": "millrace.client.byte_stream",
    "ReaderGroup": "millrace.client.reader_group",
    "ReaderGroupManager": "millrace.client.reader_group",
    "EventStreamReader": "millrace.client.reader_group",
    "EventRead": "millrace.client.reader_group",
    "EventPointer": "millrace.client.reader_group",
    "NoSuchEventError": "millrace.client.reader_group",
    "StreamDataRetention": "millrace.client.reader_group",
    "TimeWindow": "millrace.client.watermarks",
    "Position": "millrace.client.reader_group",
    "Checkpoint": "millrace.client.reader_group",
    "ReaderGroupNotFoundError": "millrace.client.reader_group",
    "ReaderNotInReaderGroupError": "millrace.client.reader_group",
    "ReaderAlreadyOnlineError": "millrace.client.reader_group",
    "CheckpointFailedError": "millrace.client.reader_group",
    "TruncatedDataError": "millrace.client.reader_group",
    "ConfigMismatchError": "millrace.client.reader_group",
    "ReinitializationRequiredError": "millrace.client.reader_group",
    "SegmentNotifier": "millrace.client.notifications",
    "SegmentNotification": "millrace.client.notifications",
    "EndOfDataNotifier": "millrace.client.notifications",
    "EndOfDataNotification": "millrace.client.notifications",
    "Serializer": "millrace.client.serializers",
    "BytesSerializer": "millrace.client.serializers",
    "StringSerializer": "millrace.client.serializers",
    "JsonSerializer": "millrace.client.serializers",
    "StoreError": "millrace.protocol.errors",
    "WriterFencedError": "millrace.protocol.errors",
    "EventsRefusedError": "millrace.protocol.errors",
    "KeyValueTableNotFoundError": "millrace.protocol.errors",
    "TableKeyNotFoundError": "millrace.protocol.errors",
    "TableKeyVersionMismatchError": "millrace.protocol.errors",
    "ConnectionLostError": "millrace.protocol.errors",
    "WriterBufferFullError": "millrace.client.writer",
    "AuthenticationError": "millrace.protocol.errors",
    "AuthorizationError": "millrace.protocol.errors",
    "ScopeNotFoundError": "millrace.protocol.errors",
    "ScopeNotEmptyError": "millrace.protocol.errors",
    "StreamNotFoundError": "millrace.protocol.errors",
    "StreamExistsError": "millrace.protocol.errors",
    "StreamSealedError": "millrace.protocol.errors",
    "StreamNotSealedError": "millrace.protocol.errors",
    "InvalidStreamCutError": "millrace.protocol.errors",
    "InvalidScaleError": "millrace.protocol.errors",
    "ScaleConflictError": "millrace.protocol.errors",
    "SegmentTruncatedError": "millrace.protocol.errors",
    "SegmentSealedError": "millrace.protocol.errors",
    "OffsetOutOfRangeError": "millrace.protocol.errors",
    "InvalidRequestError": "millrace.protocol.errors",
}
__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "BatchClient",
    "BatchEvent",
    "ByteStreamReader",
    "ByteStreamWriter",
    "BytesSerializer",
    "Checkpoint",
    "CheckpointFailedError",
    "ConfigMismatchError",
    "ConnectionLostError",
    "EndOfDataNotification",
    "EndOfDataNotifier",
    "EventPointer",
    "EventPosition",
    "EventRead",
    "EventStreamReader",
    "EventStreamWriter",
    "EventsRefusedError",
    "Insert",
    "InvalidRequestError",
    "InvalidScaleError",
    "InvalidStreamCutError",
    "JsonSerializer",
    "KeyValueTable",
    "KeyValueTableNotFoundError",
    "NoSuchEventError",
    "OffsetOutOfRangeError",
    "Position",
    "Put",
    "ReaderAlreadyOnlineError",
    "ReaderGroup",
    "ReaderGroupManager",
    "ReaderGroupNotFoundError",
    "ReaderNotInReaderGroupError",
    "ReinitializationRequiredError",
    "Remove",
    "RetentionPolicy",
    "RetentionType",
    "ScaleConflictError",
    "ScalingPolicy",
    "ScalingType",
    "ScopeNotEmptyError",
    "ScopeNotFoundError",
    "Segment",
    "SegmentNotification",
    "SegmentNotifier",
    "SegmentSealedError",
    "SegmentTruncatedError",
    "SegmentRange",
    "Serializer",
    "StateCorruptError",
    "StateNotInitializedError",
    "StateSynchronizer",
    "StoreError",
    "StreamConfiguration",
    "StreamCut",
    "StreamDataRetention",
    "StreamDescription",
    "StreamExistsError",
    "StreamManager",
    "StreamNotFoundError",
    "StreamNotSealedError",
    "StreamSealedError",
    "StringSerializer",
    "TableEntry",
    "TableKeyNotFoundError",
    "TableKeyVersionMismatchError",
    "TimeWindow",
    "Transaction",
    "TransactionalEventStreamWriter",
    "TruncatedDataError",
    "TxnFailedError",
    "TxnNotFoundError",
    "TxnStatus",
    "Updates",
    "WriterBufferFullError",
    "WriterFencedError",
]

if TYPE_CHECKING:
    from millrace.client.batch import BatchClient, BatchEvent, SegmentRange
    from millrace.client.byte_stream import ByteStreamReader, ByteStreamWriter
    from millrace.client.kvtable import Insert, KeyValueTable, Put, Remove, TableEntry
    from millrace.client.manager import StreamManager
    from millrace.client.notifications import (
        EndOfDataNotification,
        EndOfDataNotifier,
        SegmentNotification,
        SegmentNotifier,
    )
    from millrace.client.serializers import BytesSerializer, JsonSerializer, Serializer, StringSerializer
    from millrace.client.streams import (
        RetentionPolicy,
        RetentionType,
        ScalingPolicy,
        ScalingType,
        Segment,
        StreamConfiguration,
        StreamCut,
        StreamDescription,
    )
    from millrace.client.synchronizer import (
        StateCorruptError,
        StateNotInitializedError,
        StateSynchronizer,
        Updates,
    )
    from millrace.client.transactions import Transaction, TransactionalEventStreamWriter, TxnStatus
    from millrace.client.writer import EventPosition, EventStreamWriter, WriterBufferFullError
    from millrace.protocol.errors import (
        AuthenticationError,
        AuthorizationError,
        ConnectionLostError,
        EventsRefusedError,
        InvalidRequestError,
        InvalidScaleError,
        InvalidStreamCutError,
        KeyValueTableNotFoundError,
        OffsetOutOfRangeError,
        ScaleConflictError,
        ScopeNotEmptyError,
        ScopeNotFoundError,
        SegmentSealedError,
        SegmentTruncatedError,
        StoreError,
        StreamExistsError,
        StreamNotFoundError,
        StreamNotSealedError,
        StreamSealedError,
        TableKeyNotFoundError,
        TableKeyVersionMismatchError,
        TxnFailedError,
        TxnNotFoundError,
        WriterFencedError,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'millrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
