"""``MillraceDataSource``: ``format("millrace")`` on PySpark 4.0's Python data source API.

    from millrace.spark import MillraceDataSource
    spark.dataSource.register(MillraceDataSource)
    df = spark.read.format("millrace").option("endpoint", "127.0.0.1:9090").option("stream", "iot/readings").load()

Options are read and checked on the driver when a reader or writer is made (``millrace.spark.options``).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from millrace.spark.options import MillraceOptionError, sink_options, source_options
from millrace.spark.sink import MillraceBatchWriter, MillraceStreamWriter, check_schema
from millrace.spark.source import SCHEMA, MillraceBatchReader, MillraceStreamReader


class MillraceDataSource(DataSource):
    """Millrace streams as a Spark source and sink, natively: reads by stream cuts (batch and streaming,
    following scaling) and writes through transactions, exactly once per batch id."""

    @classmethod
    def name(cls) -> str:
        return "millrace"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MillraceBatchReader(source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MillraceStreamReader(source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _refuse_overwrite(overwrite)
        check_schema(schema)
        return MillraceBatchWriter(sink_options(self.options, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _refuse_overwrite(overwrite)
        check_schema(schema)
        return MillraceStreamWriter(sink_options(self.options, streaming=True))


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        # A stream is append-only: what it holds can be truncated away, never replaced.
        raise MillraceOptionError("format('millrace') appends to a stream: use mode('append'), not overwrite")
