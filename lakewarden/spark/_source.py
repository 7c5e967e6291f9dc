"""The ``lakewarden`` data source: schema, reader, batch writer and stream writer.

PySpark instantiates it with the options of each ``read`` / ``write`` / ``writeStream`` and
calls the factory methods in planner worker processes on the driver; see ``_reader``,
``_writer`` and ``_stream`` for what runs where. Each factory imports its side when called,
so a worker that unpickles this class pays only for the side it runs.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from lakewarden.spark import _worker_heap
from lakewarden.spark._options import (
    ReadSpec,
    committer_options,
    error_table_choice,
    get_option,
    ingest_errors,
    settings_json,
    table_uri,
)

FORMAT = "lakewarden"


class LakewardenDataSource(DataSource):
    """``spark.read.format("lakewarden")`` and ``df.write[Stream].format("lakewarden")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """The table's schema (narrowed by the ``columns`` option).

        Raises: NotATableError, ColumnNotFoundError, InvalidOptionError."""
        from lakewarden.spark._reader import table_schema

        return table_schema(ReadSpec.parse(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        from lakewarden.spark._reader import LakewardenReader

        _worker_heap.settle()
        return LakewardenReader(ReadSpec.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Opens the write's instant (see ``_writer.create_writer``)."""
        from lakewarden.spark._writer import create_writer

        _worker_heap.settle()
        return create_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from lakewarden.spark._stream import LakewardenStreamWriter, check_stream_target

        _worker_heap.settle()  # the stream's commits call this first, in a planner worker
        uri, encoded = table_uri(self.options), settings_json(self.options)
        diverts = ingest_errors(self.options)
        check_stream_target(uri, encoded, schema, overwrite, self.options, ingest_errors=diverts)
        checkpoint = get_option(self.options, "checkpointlocation") or ""
        return LakewardenStreamWriter(
            uri,
            encoded,
            checkpoint,
            ingest_errors=diverts,
            committer=committer_options(self.options),
            error_table=error_table_choice(self.options),
        )
