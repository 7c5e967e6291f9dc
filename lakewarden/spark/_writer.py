"""The batch writer of the ``lakewarden`` format (``DataSourceArrowWriter``).

PySpark creates it with ``DataSource.writer()`` in a planner worker on the driver, pickles it
to every task (``write`` runs there, once per task attempt) and unpickles it again in the
worker that runs ``commit`` or ``abort``. So it holds only a ``WriteSpec`` (strings), never a
client or an open file; every method opens what it needs.

``create_writer`` is where a plain-format write opens its instant (``lakewarden.spark._job``),
after checking the DataFrame's schema against the table's, so a mismatch fails before the
table is touched. The writes whose instant the driver opened itself (``lakewarden.spark.write``,
``lakewarden ingest``'s micro-batches) run the same task code without the format
(``_python_tasks``) and commit in the driver's process.

Each Spark task unpickles the writer in a Python worker, which imports this module: so it
imports at the top only what ``write`` needs (``_task``), and the driver's side (the job, the
table's creation, the commit) inside the methods that run there: a fresh worker then pays
only for the modules a task uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from lakewarden.spark import _worker_heap
from lakewarden.spark._options import (
    WriteSpec,
    check_table_type,
    committer_options,
    error_table_choice,
    ingest_errors,
    settings_json,
    table_uri,
    write_operation,
)
from lakewarden.spark._task import current_task, write_task


class LakewardenWriter(DataSourceArrowWriter):
    """One write = one instant; see ``lakewarden.spark._job`` for the protocol."""

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """One task attempt (on an executor). Raises: InvalidRecordError and the rest of
        ``lakewarden.spark._task.write_task``."""
        return write_task(self.spec, current_task(), iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Job commit of the accepted attempts, then ``completed`` (driver)."""
        from lakewarden.spark import _job

        _worker_heap.settle()  # the commit is a planner worker's call of its own
        _job.commit_write(self.spec, messages)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """``rolled_back``, then job abort; nothing if the instant completed (driver)."""
        from lakewarden.spark import _job

        _worker_heap.settle()
        _job.abort_write(self.spec, "the Spark write job failed and was aborted")


def create_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> LakewardenWriter:
    """Create the table if absent (``_create``), then open the write's instant.

    Raises: InvalidOptionError, NotATableError, TableOptionsMismatchError,
    InvalidTableConfigError, SchemaMismatchError, LockTimeoutError."""
    from lakewarden.spark import _job
    from lakewarden.spark._arrow import check_write_schema
    from lakewarden.spark._bad_rows import INGEST_COLUMNS
    from lakewarden.spark._create import prepare_table
    from lakewarden.spark._keeper import keep_alive
    from lakewarden.table.timeline import Timeline

    uri = table_uri(options)
    operation = write_operation(options, overwrite)
    encoded = settings_json(options)
    diverts = ingest_errors(options)
    ignore = INGEST_COLUMNS if diverts else ()
    prepare_table(uri, encoded, options, StructType([f for f in schema if f.name not in ignore]))
    table = _job.TableHandle.open(uri, encoded)
    check_table_type(options, table.config)
    check_write_schema(schema, table.config, operation, ignore=ignore)
    committer = committer_options(options)
    errors_to = error_table_choice(options)
    spec, txn = _job.open_write(table, operation, settings_json=encoded)
    spec = dataclasses.replace(
        spec, ingest_errors=diverts, committer=committer, error_table=errors_to
    )
    keep_alive(
        Timeline(table.storage, table=table.config.name),
        table.coordinator,
        table.config.table_id,
        spec.instant,
        txn.actor,
    )
    return LakewardenWriter(spec)
