"""``lakewarden.spark.write(df, uri, operation=...)``: what the plain format cannot do.

The plain format cannot shuffle: its tasks see whatever rows Spark gives them, so they can
only append. Upserts, deletes and inserts into the buckets' canonical file groups need every
row of a file group in one task, which this helper arranges on the driver, in the process that
owns the instant from first to last entry:

1. check the schema; set up the job and append ``requested`` (``_job.open_write``);
2. under the instant's heartbeat (held here for the whole job):
   a. add the file group columns (partition path, bucket) with the table's own routing
      functions, in a ``mapInArrow`` over the input, and persist the result;
   b. the workload profile: the distinct file groups, plus the append groups of their buckets
      (which the merge consolidates), appended as ``inflight``;
   c. repartition by (partition path, bucket) so each file group lands in exactly one task,
      whose rows the format's task code merges and writes in a Python worker
      (``_python_tasks``), returning the attempt's commit message;
   d. the job commit of the attempts Spark accepted and ``completed``, in this process;
3. read the outcome from the timeline: a completed instant is the result; otherwise the
   instant is abandoned (``rolled_back``, job abort) if still pending, and the failure raised:
   the named conflict when a conflict rule explains it, else ``SparkWriteError`` with the
   instant, the rollback reason and Spark's message.

``bulk_insert`` skips 2a-2c (no shuffle: append groups, as the plain format writes), and
with option ``writer``: ``python`` (default: the format's task code, as in 2c), ``spark``
(Spark's own Parquet writer, ``_native``: no row goes through Python, the bucket is computed
by a Java UDF; refused with the reason where it cannot run) or ``auto`` (``spark`` where it
can run, else ``python``). ``python`` is the default because it is the faster of the two, in
wall time and in CPU (``python -m benchmarks spark`` measures both against
``df.write.parquet``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from lakewarden.errors import NonRetryableError
from lakewarden.settings import Settings
from lakewarden.spark import _job, _jvm_udf, _native, _python_tasks
from lakewarden.spark._arrow import check_write_schema, conform
from lakewarden.spark._bad_rows import typed_bad_rows
from lakewarden.spark._create import prepare_table
from lakewarden.spark._options import (
    HELPER_OPERATIONS,
    InvalidOptionError,
    WriteSpec,
    check_table_type,
    committer_options,
    encode_settings,
    error_table_choice,
    get_option,
    load_settings,
)
from lakewarden.spark._task import base_snapshot
from lakewarden.spark._transaction import SparkTransaction
from lakewarden.table import conflicts
from lakewarden.table.bucket import BucketSlices, key_buckets, key_strings, partition_codes
from lakewarden.table.config import TableConfig
from lakewarden.table.files import bucket_file_id
from lakewarden.table.instant import Transition
from lakewarden.table.stats import FileGroupId, WorkloadProfile
from lakewarden.table.timeline_state import InstantState
from lakewarden.table.writer import CommitResult

PARTITION_COLUMN = "__lw_partition_path"
BUCKET_COLUMN = "__lw_bucket"
OPT_WRITER = "writer"
log = logging.getLogger("lakewarden.spark")
# A line naming an error: ``InvalidRecordError: ...`` or, as a Python worker's traceback ends,
# the qualified ``lakewarden.table.write_input.InvalidRecordError: ...``.
_SPARK_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Conflict|Exception): .*$", re.MULTILINE)


class SparkWriteError(NonRetryableError):
    """A Spark write did not commit; the instant was rolled back (``reason`` says why)."""

    def __init__(self, message: str, *, table: str, instant: str, reason: str | None) -> None:
        super().__init__(message, table=table, instant=instant)
        self.reason = reason


def write(
    df: DataFrame,
    uri: str,
    operation: str = "upsert",
    *,
    settings: Settings | None = None,
    partitions: int | None = None,
    options: Mapping[str, str] | None = None,
) -> CommitResult:
    """Write ``df`` to the table at ``uri`` as one instant (steps in the module docstring).

    ``operation``: ``upsert`` (by record key; the larger ordering field wins), ``delete``
    (``df`` needs the record key and partition columns), ``insert`` (into the canonical file
    groups, no deduplication) or ``bulk_insert`` (no shuffle). ``partitions``: tasks of the
    merge (default: ``spark.sql.shuffle.partitions``, at most one per file group).
    ``options``: options of the ``lakewarden`` format; the table options (``record_key``,
    ``partition_by``, ``ordering_field``, ``buckets``, ``table_type``) create the table when
    absent and must agree with it when present (``lakewarden.spark._create``).

    Raises: SchemaMismatchError (nothing written), TableOptionsMismatchError,
    NotATableError (absent and no ``record_key`` to create it), OverlappingCommitConflict /
    PendingPlanConflict (rolled back), SparkWriteError (rolled back: bad rows, task
    failures), CommitStateUnknownError, LockTimeoutError, InvalidOptionError.
    """
    if operation not in HELPER_OPERATIONS:
        raise InvalidOptionError(
            f"operation must be one of {', '.join(HELPER_OPERATIONS)}, got {operation!r}"
        )
    from lakewarden.spark import register

    register(df.sparkSession)
    encoded = encode_settings(settings) if settings is not None else None
    prepare_table(uri, encoded, options or {}, df.schema)
    table = _job.TableHandle.open(uri, encoded)
    check_table_type(options or {}, table.config)
    check_write_schema(df.schema, table.config, operation)
    merge = operation != "bulk_insert"
    native = not merge and _native_writer(options or {}, table, encoded)
    committer = committer_options(options or {})
    spec, txn = _job.open_write(  # 1.
        table, operation, settings_json=encoded, merge=merge, profiled=merge
    )
    spec = dataclasses.replace(
        spec, committer=committer, error_table=error_table_choice(options or {})
    )
    keyed: DataFrame | None = None
    failure: Exception | None = None
    with txn.heartbeat():  # 2.
        try:
            data = df
            if merge:
                data, keyed = _clustered(df, table, spec, txn, partitions)
            if native:
                _native.write_files(df, table.config, spec, table.storage)
                messages = [_native.adopt_files(table.storage, table.config, spec)]
            else:
                messages = _python_tasks.write(data, spec, table.config)
            _job.commit_write(spec, messages, table=table, beating=True)  # 2d.
        except Exception as err:
            failure = err
        finally:
            if keyed is not None:
                keyed.unpersist()
    return _outcome(table, spec, failure)  # 3.


def _native_writer(
    options: Mapping[str, str], table: _job.TableHandle, encoded: str | None
) -> bool:
    """Whether a ``bulk_insert`` goes through Spark's Parquet writer (option ``writer``,
    default ``python``: see the module docstring).

    Raises: InvalidOptionError (an unknown value, or ``spark`` where it cannot be used)."""
    choice = (get_option(options, OPT_WRITER) or "python").lower()
    if choice not in ("auto", "spark", "python"):
        raise InvalidOptionError(f"option writer must be auto, spark or python, got {choice!r}")
    if choice == "python":
        return False
    reason = _native.unsupported_reason(table.config, load_settings(encoded), table.storage)
    if reason is None:
        try:
            _jvm_udf.jar_path()
        except _jvm_udf.JvmUdfUnavailableError as err:
            reason = str(err)
    if reason is not None and choice == "spark":
        raise InvalidOptionError(f"option writer=spark cannot be used for this write: {reason}")
    if reason is not None:
        log.info("bulk_insert through the Python data source: %s", reason)
    return reason is None


def _clustered(
    df: DataFrame,
    table: _job.TableHandle,
    spec: WriteSpec,
    txn: SparkTransaction,
    partitions: int | None,
) -> tuple[DataFrame, DataFrame]:
    """Steps 2a-2c: the input clustered by file group, and the persisted keyed input (the
    caller unpersists it)."""
    keyed = with_file_groups(df, table.config, spec).persist(StorageLevel.MEMORY_AND_DISK)
    rows = keyed.select(PARTITION_COLUMN, BUCKET_COLUMN).distinct().collect()
    # A null bucket: bad rows on their way to the error table (``python_file_groups``).
    canonical = [
        FileGroupId(partition_path=r[0], file_id=bucket_file_id(r[1]))
        for r in rows
        if r[1] is not None
    ]
    buckets = BucketSlices(base_snapshot(table.storage, table.config, spec.instant))
    touched = dict.fromkeys(g for c in canonical for g in buckets.file_groups(c))
    txn.inflight(WorkloadProfile(operation=spec.operation, file_groups=tuple(touched)))
    session = df.sparkSession
    wanted = partitions or int(session.conf.get("spark.sql.shuffle.partitions") or "200")
    count = max(1, min(wanted, len(canonical)))
    clustered = keyed.repartition(count, PARTITION_COLUMN, BUCKET_COLUMN)
    return clustered.drop(PARTITION_COLUMN, BUCKET_COLUMN), keyed


def with_file_groups(df: DataFrame, config: TableConfig, spec: WriteSpec) -> DataFrame:
    """``df`` with the partition path and bucket of every row: in the JVM (``_jvm_udf``)
    where the key and partition columns already have the table's types, else by the table's
    routing functions in Python after casting them to the table's types (the text of a key
    decides its bucket, so it must be the text of the table type; ``python_file_groups``)."""
    jvm = None
    try:
        _jvm_udf.register(df.sparkSession)
        jvm = _native.file_group_columns(df, config, spec)
    except _jvm_udf.JvmUdfUnavailableError as err:
        log.info("file groups of the %s computed in Python: %s", spec.operation, err)
    if jvm is not None:
        return df.withColumns({PARTITION_COLUMN: jvm[0], BUCKET_COLUMN: jvm[1]})
    diverts = spec.settings().error_table.enabled or spec.ingest_errors
    schema = StructType(
        [
            *df.schema.fields,
            StructField(PARTITION_COLUMN, StringType(), diverts),
            StructField(BUCKET_COLUMN, IntegerType(), diverts),
        ]
    )
    return df.mapInArrow(python_file_groups(config, divert_bad=diverts), schema)


def python_file_groups(
    config: TableConfig, *, divert_bad: bool
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that appends each row's partition path and bucket.

    A row whose key or partition values are bad (a null key, a value that does not fit the
    table type): with ``divert_bad`` (the error table is on) it gets a null path and bucket,
    so the shuffle takes it to one task whose ``BadRows`` publishes it to the error table
    (and ``_clustered`` leaves it out of the workload profile); without, the first one fails
    the write (InvalidRecordError, naming the row)."""

    def add(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = 0
        for batch in batches:
            table = pa.Table.from_batches([batch])
            keep = None
            if divert_bad:
                bad, _ = typed_bad_rows(table, config, "delete")
                if bad:
                    keep = pa.array([i not in bad for i in range(batch.num_rows)], pa.bool_())
                    table = table.filter(keep)
            keys = conform(table, config, "delete", first_row=rows, where="profiling the write")
            rows += batch.num_rows
            codes, paths = partition_codes(keys, config.partition_by)
            path: pa.Array = pa.array(paths, pa.string()).take(codes)
            bucket: pa.Array = key_buckets(
                key_strings(keys.column(config.record_key)), config.buckets
            )
            if keep is not None:  # the bad rows' path and bucket are null
                path = pc.replace_with_mask(pa.nulls(batch.num_rows, pa.string()), keep, path)
                bucket = pc.replace_with_mask(pa.nulls(batch.num_rows, pa.int32()), keep, bucket)
            yield batch.append_column(PARTITION_COLUMN, path).append_column(BUCKET_COLUMN, bucket)

    return add


def _outcome(table: _job.TableHandle, spec: WriteSpec, err: Exception | None) -> CommitResult:
    """The completed instant's result, else the failure (abandoning the instant if pending)."""
    mine = table.timeline.load().get(spec.instant)
    if mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None:
        if err is not None:
            log.warning("instant %s completed, but Spark then failed: %s", spec.instant, err)
        return CommitResult(spec.instant, mine.commit)
    if mine is not None and mine.is_pending:
        _job.abandon(table, spec, _spark_reason(err))
    state = table.timeline.load()
    mine = state.get(spec.instant)
    failure: Exception
    finding = None
    if mine is not None and (mine.error_type or "").endswith("Conflict"):
        finding = conflicts.find_conflict(state, mine, None)
    if finding is not None:
        failure = finding.error(table.config.table_id)
    else:
        failure = _write_error(spec, mine, err)
    raise failure from err


def _write_error(spec: WriteSpec, mine: InstantState | None, err: Exception | None) -> Exception:
    """The ``SparkWriteError`` of a write that did not commit: what became of the instant
    (rolled back and why, or still pending when the rollback itself failed) and Spark's
    reason, never empty."""
    spark_reason = _spark_reason(err)
    if mine is not None and mine.state is Transition.ROLLED_BACK:
        reason = mine.reason or spark_reason
        became = f"was rolled back: {reason}"
    else:
        reason = spark_reason
        state = mine.state if mine is not None else "absent"
        became = f"was not rolled back (it is {state}; the cleaner rolls it back)"
    return SparkWriteError(
        f"lakewarden: the {spec.operation} of instant {spec.instant} into table "
        f"{spec.uri} did not commit and {became}. Spark reported: {spark_reason}",
        table=spec.uri,
        instant=spec.instant,
        reason=reason,
    )


def _spark_reason(err: Exception | None) -> str:
    """The most telling line of a Spark failure (the Python error raised in a task)."""
    if err is None:
        return "no error (the instant is not completed)"
    text = str(err)
    lines = [m.group(0) for m in _SPARK_ERROR_LINE.finditer(text)]
    ours = [line for line in lines if "lakewarden" in line or "record" in line]
    # PySpark's PythonException text starts with an empty line: the first non-empty line,
    # else the error's type, so the reason is never empty (an empty reason cannot even be
    # appended as a rollback's).
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (ours or lines or [first or repr(err)])[0][:2000]
