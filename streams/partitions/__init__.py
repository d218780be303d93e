"""Kafka partitions over stream segments, behind one storage boundary (``storage.PartitionStorage``).

Units, each with its invariants written at its top: ``formats`` (what is stored), ``offset_index``
(offset -> batch), ``producers`` (idempotence), ``segments`` (segment writers, index segments and their
recovery), ``watermark`` (high watermark and acknowledgement order), ``waiters`` (long-poll),
``reads`` (fetch), ``retention`` (log start and truncation), ``partition`` (one partition's state),
``loading`` (a topic's load, off the reactor) and ``storage`` (the boundary and its implementation).
The thread model is in ``millrace.streams.futures``.
"""

from millrace.streams.errors import PartitionError
from millrace.streams.partitions.partition import PartitionLog, PartitionOffsets
from millrace.streams.partitions.storage import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedRecords,
    PartitionStorage,
    PlannedFetch,
    SegmentPartitionStorage,
)

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "MAX_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchedRecords",
    "PartitionError",
    "PartitionLog",
    "PartitionOffsets",
    "PartitionStorage",
    "PlannedFetch",
    "SegmentPartitionStorage",
]
