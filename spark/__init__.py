"""The native Spark connector: ``format("millrace")`` on PySpark 4.0's Python data source API.

    from millrace.spark import MillraceDataSource
    spark.dataSource.register(MillraceDataSource)

Batch and streaming reads by stream cuts (one input partition per segment range, following splits and
merges) and a batch and streaming sink writing through transactions, exactly once per batch id. It uses
only the native client's public API (``millrace``), and needs PySpark (the ``spark`` extra).
"""

from __future__ import annotations

from millrace.spark.datasource import MillraceDataSource
from millrace.spark.options import MillraceOptionError
from millrace.spark.sink import SinkCommitError, SinkSchemaError

__all__ = ["MillraceDataSource", "MillraceOptionError", "SinkCommitError", "SinkSchemaError"]
