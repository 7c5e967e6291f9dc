"""``bulk_insert`` through Spark's own Parquet writer: no Python Data Source hop for the rows.

The Python Data Source path moves every row through a Python worker as Arrow batches, which
on a 2-core machine costs about as much as Spark's whole Parquet write. An append needs Python
for one thing only: the bucket of each record key (FNV-1a of its text, ``table.bucket``), which
Spark has no function for. So this path sends Python the key column alone (a ``pandas_udf``)
and lets Spark write every column, in the JVM, with its vectorised Parquet writer.

The protocol is the plain format's, with Spark's committer guarding the task attempts:

1. ``_job.open_write`` (the helper): committer job set up, table lock, ``requested``.
2. Under the instant's heartbeat, one Spark job writes the rows, with the meta columns
   computed by Spark (commit time, record key text, partition path, file name), partitioned by
   two hidden columns (partition path, bucket) so that each task writes one file per file
   group, into ``_temporary/manifest_<jobId>/spark/`` (inside the job's own directory, so job
   abort and cleanup delete whatever is left there). Spark's ``FileOutputCommitter``
   (algorithm 1, forced by a write option) promotes exactly one attempt per task: a failed,
   retried or speculative attempt's files never leave its ``_temporary`` attempt directory.
3. The driver adopts the promoted files as one task attempt of the lakewarden job (task 0,
   attempt 0): each file's file group and name are read from its own meta columns (Parquet
   column statistics, checked to be a single value), it is fsynced and renamed into the
   attempt's working directory under its destination key, and the task commit saves the
   manifest. Two files for one destination (a committer that let two attempts through) fail
   the write.
4. ``_job.commit_write`` with that one message: ``inflight`` with the workload profile, job
   commit of exactly that attempt, ``completed`` (in the driver, or by job-committer with
   Kafka configured) — the same code the Python Data Source path runs.

File names: each task's rows of a bucket form the append group ``<bucket>-<instant>-<task>``
(as on the Python path); a file's write token is ``<task>-0-0`` because a SQL expression sees
the task's partition id but not its stage or attempt number. Only one attempt per task is
promoted (step 2), so the name is still unique.

Where it does not apply (``unsupported_reason``), the helper keeps the Python Data Source
path: storage without local paths (S3 uploads), the error table on (bad rows are routed in
Python), column types whose Spark Parquet encoding differs from pyarrow's (timestamps,
decimals, unsigned and large types), record keys other than integers and strings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own idiom

from lakewarden.commit import ManifestCommitter
from lakewarden.commit._store import CommitStore
from lakewarden.commit.layout import JobLayout
from lakewarden.errors import NonRetryableError
from lakewarden.settings import Settings
from lakewarden.spark import _faults
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import WriteSpec
from lakewarden.storage import Storage
from lakewarden.table.bucket import key_buckets, partition_codes
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
    TableConfig,
)
from lakewarden.table.files import BaseFileName, file_key
from lakewarden.table.stats import FileGroupId, WriteStat

log = logging.getLogger("lakewarden.spark")

# Hidden partition columns of the Spark write (dropped from the files by Spark).
_PATH_COLUMN = "__lw_native_path"
_BUCKET_COLUMN = "__lw_native_bucket"
_STAGING = "spark"
# Table types Spark writes to Parquet exactly as pyarrow reads them back, by Spark SQL type.
_SPARK_TYPES: dict[pa.DataType, str] = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
}


class NativeWriteError(NonRetryableError):
    """Spark's output could not be adopted (a file without its meta columns, or two files
    for one destination); nothing of the write becomes visible."""


def unsupported_reason(config: TableConfig, settings: Settings, storage: Storage) -> str | None:
    """Why a ``bulk_insert`` cannot go through Spark's Parquet writer, or None if it can."""
    if storage.local_path(_STAGING) is None or not CommitStore(storage).can_rename:
        return "the table's storage has no local paths (S3 uploads need the Python writer)"
    if settings.error_table.enabled:
        return "the error table is on (bad rows are routed in Python)"
    for field in config.pa_schema:
        if field.type not in _SPARK_TYPES:
            return f"column {field.name!r} has type {field.type}, which Spark writes differently"
    key_type = config.pa_schema.field(config.record_key).type
    if not (pa.types.is_integer(key_type) or pa.types.is_string(key_type)):
        return f"record key type {key_type} (its text in Spark may differ from pyarrow's)"
    return None


def write_files(df: DataFrame, config: TableConfig, spec: WriteSpec, storage: Storage) -> None:
    """Step 2: one Spark job writing the rows into the job's staging directory.

    Raises: whatever Spark raises (a bad value fails its task with the record key named)."""
    out = _with_meta(df, config, spec)
    writer = out.write.mode("errorifexists").partitionBy(_PATH_COLUMN, _BUCKET_COLUMN)
    # One file per task and file group, and only committed task attempts promoted.
    writer = writer.option("maxRecordsPerFile", 0)
    writer = writer.option("mapreduce.fileoutputcommitter.algorithm.version", "1")
    writer.parquet(_staging_path(storage, spec))


def adopt_files(storage: Storage, spec: WriteSpec) -> TaskCommitMessage:
    """Step 3: Spark's promoted files as the task attempt 0 of task 0, committed.

    Raises: NativeWriteError, PathOutsideTableError, StageFailedError."""
    attempt = ManifestCommitter(storage, spec.job_id).task_attempt(0, 0)
    attempt.setup()
    stats: list[WriteStat] = []
    rows = 0
    for path in _data_files(Path(_staging_path(storage, spec))):
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows == 0:
            continue
        partition_path, name = _identity(path, meta)
        group = FileGroupId(partition_path=partition_path, file_id=BaseFileName.parse(name).file_id)
        key = file_key(partition_path, name)
        _fsync(path)  # Spark does not; the manifest must only name durable files
        destination = attempt.local_path(key)  # claims the key: a second claim is refused
        os.rename(path, destination)
        size = os.path.getsize(destination)
        stats.append(
            WriteStat(
                file_group=group,
                path=key,
                base_instant=spec.instant,
                num_records=meta.num_rows,
                num_inserts=meta.num_rows,
                size_bytes=size,
            )
        )
        rows += meta.num_rows
    result = attempt.commit(extra_data={"instant": spec.instant, "operation": spec.operation})
    return TaskCommitMessage(
        instant=spec.instant,
        job_id=spec.job_id,
        attempt_id=str(attempt.attempt_id),
        manifest_key=result.manifest_key,
        write_stats=tuple(stats),
        num_input_records=rows,
    )


def _staging_path(storage: Storage, spec: WriteSpec) -> str:
    path = storage.local_path(JobLayout(spec.job_id).job_dir + _STAGING)
    assert path is not None  # unsupported_reason() checked it
    return path


def _data_files(root: Path) -> Iterator[Path]:
    """Spark's promoted data files (its ``_SUCCESS``, ``.crc`` and ``_temporary`` left out)."""
    for path in sorted(root.rglob("*.parquet")):
        relative = path.relative_to(root).parts
        if not any(part.startswith(("_temporary", ".")) for part in relative):
            yield path


def _identity(path: Path, meta: pq.FileMetaData) -> tuple[str, str]:
    """(partition path, file name) from the file's meta columns, which hold one value each.

    Raises: NativeWriteError."""
    values: dict[str, set[str]] = {META_PARTITION_PATH: set(), META_FILE_NAME: set()}
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            if chunk.path_in_schema in values:
                stats = chunk.statistics
                if stats is None or not stats.has_min_max:
                    return _identity_from_rows(path)
                values[chunk.path_in_schema].update((str(stats.min), str(stats.max)))
    found = {name: sorted(v) for name, v in values.items()}
    if any(len(v) != 1 for v in found.values()):
        raise NativeWriteError(
            f"Spark wrote {path} with meta columns {found}: one value each was expected. "
            "Help: this is a bug in lakewarden's Spark writer; nothing was committed."
        )
    return found[META_PARTITION_PATH][0], found[META_FILE_NAME][0]


def _identity_from_rows(path: Path) -> tuple[str, str]:
    """``_identity`` for a file without column statistics: read the two meta columns."""
    table = pq.read_table(path, columns=[META_PARTITION_PATH, META_FILE_NAME])
    paths = set(table.column(META_PARTITION_PATH).unique().to_pylist())
    names = set(table.column(META_FILE_NAME).unique().to_pylist())
    if len(paths) != 1 or len(names) != 1:
        raise NativeWriteError(
            f"Spark wrote {path} with partition paths {sorted(paths)} and file names "
            f"{sorted(names)}: one of each was expected. Help: this is a bug in lakewarden's "
            "Spark writer; nothing was committed."
        )
    return str(paths.pop()), str(names.pop())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the DataFrame Spark writes -------------------------------------------------------------


def _with_meta(df: DataFrame, config: TableConfig, spec: WriteSpec) -> DataFrame:
    """``df`` as the table's file schema plus the two hidden partition columns."""
    key = _conformed(df, config, config.record_key, required=True, spec=spec)
    bucket = _bucket_udf(config.buckets, spec.test_hooks)(key)
    if config.partition_by:
        parts = [_conformed(df, config, f, required=False, spec=spec) for f in config.partition_by]
        path = _path_udf(config)(*parts)
    else:
        path = F.lit("")
    task = F.lpad(F.spark_partition_id().cast("string"), 5, "0")
    # append_group(): "<bucket:08d>-<instant>-<task:05d>"; token "<task>-0-0" (module doc).
    name = F.concat(
        F.lpad(bucket.cast("string"), 8, "0"),
        F.lit(f"-{spec.instant}-"),
        task,
        F.lit("_"),
        F.spark_partition_id().cast("string"),
        F.lit(f"-0-0_{spec.instant}.parquet"),
    )
    columns = [
        F.lit(spec.instant).alias(META_COMMIT_TIME),
        key.cast("string").alias(META_RECORD_KEY),
        path.alias(META_PARTITION_PATH),
        name.alias(META_FILE_NAME),
    ]
    for field in config.pa_schema:
        required = field.name == config.record_key or not field.nullable
        columns.append(
            _conformed(df, config, field.name, required=required, spec=spec).alias(field.name)
        )
    return df.select(*columns, path.alias(_PATH_COLUMN), bucket.alias(_BUCKET_COLUMN))


def _conformed(
    df: DataFrame, config: TableConfig, name: str, *, required: bool, spec: WriteSpec
) -> Column:
    """Column ``name`` in the table's type; a value that does not fit, or a null where the
    table requires a value, fails the task naming the column, the type and the record key."""
    target = _SPARK_TYPES[config.pa_schema.field(name).type]
    source = F.col(_quoted(name))
    if df.schema[name].dataType.simpleString() == target:
        value = source
        bad = source.isNull() if required else F.lit(False)
    else:
        value = F.expr(f"try_cast({_quoted(name)} AS {target})")
        bad = value.isNull() & (source.isNotNull() | F.lit(required))
    if not required and value is source:
        return value
    key = F.coalesce(F.col(_quoted(config.record_key)).cast("string"), F.lit("null"))
    message = F.concat(
        F.lit(
            f"lakewarden: instant {spec.instant} of table {spec.uri}: the value of column "
            f"{name!r} does not fit the table type {config.pa_schema.field(name).type}"
            f"{' (required)' if required else ''}, record key "
        ),
        key,
    )
    return F.when(bad, F.raise_error(message)).otherwise(value)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _bucket_udf(buckets: int, hooks: dict[str, str]) -> Any:
    """A ``pandas_udf`` giving each record key's bucket (``key_buckets``)."""
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark.sql.functions import pandas_udf  # type: ignore[attr-defined]

    def bucket(keys: Any) -> Any:
        if hooks:
            _task_faults(hooks)
        return key_buckets(pa.Array.from_pandas(keys), buckets).to_pandas()

    # PySpark infers the UDF's kind from these (text annotations would not resolve here).
    bucket.__annotations__ = {"keys": pd.Series, "return": pd.Series}
    return pandas_udf(bucket, "int")


def _path_udf(config: TableConfig) -> Any:
    """A ``pandas_udf`` giving each row's partition path (``partition_codes``)."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf  # type: ignore[attr-defined]

    fields = list(config.partition_by)
    types = [config.pa_schema.field(f).type for f in fields]

    def path(*values: Any) -> Any:
        table = pa.table(
            [pa.Array.from_pandas(v, type=t) for v, t in zip(values, types, strict=True)],
            names=fields,
        )
        codes, paths = partition_codes(table, fields)
        return pa.array(paths, pa.string()).take(codes).to_pandas()

    path.__annotations__ = {"values": pd.Series, "return": pd.Series}
    return pandas_udf(path, "string")


def _task_faults(hooks: dict[str, str]) -> None:
    """The write's ``lakewarden.test.*`` faults, in the task that evaluates the UDF.

    Raises: InjectedFaultError."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return
    _faults.before_write(hooks, ctx.partitionId(), ctx.attemptNumber())
    _faults.after_task_commit(hooks, ctx.partitionId(), ctx.attemptNumber())
