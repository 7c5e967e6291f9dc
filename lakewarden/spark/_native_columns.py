"""The DataFrame Spark's own Parquet writer writes (``_native``): the table's stored schema (the
meta columns a file stores, then the table's columns in its types, each checked) plus two
hidden partition columns (the row's partition path and bucket).

Building these column expressions costs a Py4J round trip for every ``F.*`` call: about 600
for a ten-column table, which a streaming query paid for every micro-batch (22% of the
driver's time in a profile of ``lakewarden ingest``). They depend on the write only through
its instant, so ``MetaColumns`` builds them once per (input schema, table, faults) with the
instant as a column reference (``_INSTANT_COLUMN``), and each write adds the instant as a
literal column and selects the kept expressions: a handful of round trips. Spark's optimizer
folds the literal into the expressions, so the plan it runs is the one of literal instants.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own idiom
from pyspark.sql.types import StructType

import lakewarden.faults as faults
from lakewarden.spark import _jvm_udf
from lakewarden.table.bucket import (
    MAX_PARTITION_SEGMENT_BYTES,
    escape_partition_value,
    partition_codes,
)
from lakewarden.table.config import (
    META_COLUMNS,
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
    TableConfig,
)

# Hidden partition columns of the Spark write (dropped from the files by Spark).
PATH_COLUMN = "__lw_native_path"
BUCKET_COLUMN = "__lw_native_bucket"
# The write's instant, added per write as a literal and dropped by the select.
_INSTANT_COLUMN = "__lw_native_instant"
# The fault points of a Spark task (``lakewarden.faults``): only when a test's plan arms one
# does the write get the pass-through UDF that reaches them.
TASK_FAULTS = "spark.task."
# Table types Spark writes to Parquet exactly as pyarrow reads them back, by Spark SQL type.
SPARK_TYPES: dict[pa.DataType, str] = {
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
# Partition column types whose Spark ``cast(... as string)`` is pyarrow's string cast (the
# text a partition path is made of); floating point differs (``1.0E20`` vs ``1e+20``).
JVM_TEXT_TYPES = frozenset(
    [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.string(), pa.date32()]
)


class MetaColumns:
    """The write's column expressions for inputs of one schema into one table (module doc).

    ``matches`` says whether a write may reuse them; ``apply`` gives the DataFrame to write
    for one instant."""

    def __init__(
        self, schema: StructType, config: TableConfig, uri: str, armed: bool = False
    ) -> None:
        self.schema, self.config, self.uri, self.armed = schema, config, uri, armed
        self._columns = _columns(_Build(schema, config, uri, armed, instant=F.col(_INSTANT_COLUMN)))

    def matches(
        self, schema: StructType, config: TableConfig, uri: str, armed: bool = False
    ) -> bool:
        return (self.schema, self.config, self.uri, self.armed) == (schema, config, uri, armed)

    def apply(self, df: DataFrame, instant: str) -> DataFrame:
        """``df`` (of this schema) as the table's file schema plus the hidden columns, its
        rows written under ``instant``."""
        return df.withColumn(_INSTANT_COLUMN, F.lit(instant)).select(*self._columns)


class _Build:
    """What the expressions are built from (the input schema, the table, its uri, faults)."""

    def __init__(
        self,
        schema: StructType,
        config: TableConfig,
        uri: str,
        armed: bool,
        instant: Column,
    ) -> None:
        self.schema, self.config, self.uri, self.armed = schema, config, uri, armed
        self.instant = instant

    def source_type(self, name: str) -> str:
        simple: str = self.schema[name].dataType.simpleString()
        return simple

    def prefix(self) -> Column:
        """``lakewarden: instant <instant> of table <uri>: `` of every error message."""
        return F.concat(
            F.lit("lakewarden: instant "), self.instant, F.lit(f" of table {self.uri}: ")
        )


def _columns(build: _Build) -> list[Column]:
    """The meta columns, the table's columns, then the two hidden partition columns.

    The bucket and the partition path are computed in the JVM (``_jvm_udf``); only a
    partition column whose Spark text differs from pyarrow's (floating point) still goes
    through a ``pandas_udf``, and a test's task faults through a pass-through one."""
    config = build.config
    key = _conformed(build, config.record_key, required=True)
    key_text = key.cast("string")
    bucket = _jvm_udf.key_bucket(key_text, config.buckets)
    if build.armed:
        bucket = _fault_udf()(bucket)
    path = _partition_path(build)
    task = F.lpad(F.spark_partition_id().cast("string"), 5, "0")
    # append_group(): "<bucket:08d>-<instant>-<task:05d>"; token "<task>-0-0" (``_native``).
    name = F.concat(
        F.lpad(bucket.cast("string"), 8, "0"),
        F.lit("-"),
        build.instant,
        F.lit("-"),
        task,
        F.lit("_"),
        F.spark_partition_id().cast("string"),
        F.lit("-0-0_"),
        build.instant,
        F.lit(".parquet"),
    )
    columns = [
        build.instant.alias(META_COMMIT_TIME),
        key_text.alias(META_RECORD_KEY),
        path.alias(META_PARTITION_PATH),
        name.alias(META_FILE_NAME),
    ]
    # From format version 2 the file's key gives these two (``TableConfig.virtual_columns``):
    # the driver names the file from its hidden partition directories (``_native``).
    virtual = set(config.virtual_columns)
    columns = [c for c, n in zip(columns, META_COLUMNS, strict=True) if n not in virtual]
    for field in config.pa_schema:
        required = field.name == config.record_key or not field.nullable
        columns.append(_conformed(build, field.name, required=required).alias(field.name))
    return [*columns, path.alias(PATH_COLUMN), bucket.alias(BUCKET_COLUMN)]


def file_group_columns(
    df: DataFrame, config: TableConfig, uri: str, instant: str
) -> tuple[Column, Column] | None:
    """(partition path, bucket) of every row of a merge's input, computed in the JVM, or
    None where Python must compute them: a key or partition column whose Spark type is not
    the table's (its text, hence its bucket or path, would be the cast's), or whose text in
    Spark differs from pyarrow's."""
    for name in (config.record_key, *config.partition_by):
        table_type = config.pa_schema.field(name).type
        if table_type not in JVM_TEXT_TYPES or name not in df.columns:
            return None
        if df.schema[name].dataType.simpleString() != SPARK_TYPES[table_type]:
            return None
    if config.pa_schema.field(config.record_key).type in (pa.bool_(), pa.date32()):
        return None
    key_text = F.col(quoted(config.record_key)).cast("string")
    bucket = _jvm_udf.key_bucket(key_text, config.buckets)
    build = _Build(df.schema, config, uri, False, instant=F.lit(instant))
    return _partition_path(build), bucket


def _partition_path(build: _Build) -> Column:
    """Each row's ``k=v/k2=v2`` (``partition_codes``), in the JVM where Spark's text of the
    values is pyarrow's; a segment longer than a directory name fails the write naming it."""
    config = build.config
    if not config.partition_by:
        return F.lit("")
    parts = [_conformed(build, f, required=False) for f in config.partition_by]
    types = [config.pa_schema.field(f).type for f in config.partition_by]
    if not all(t in JVM_TEXT_TYPES for t in types):
        udf_path: Column = _path_udf(config)(*parts)
        return udf_path
    segments = []
    for field, value in zip(config.partition_by, parts, strict=True):
        segment = F.concat(
            F.lit(f"{escape_partition_value(field)}="),
            _jvm_udf.partition_value(value.cast("string")),
        )
        message = F.concat(
            build.prefix(),
            F.lit(
                f"partition field {field!r} has a value whose directory name would be longer "
                f"than {MAX_PARTITION_SEGMENT_BYTES} bytes: "
            ),
            F.substring(value.cast("string"), 1, 40),
            F.lit("... Help: partition by a shorter value (a prefix, a hash, a date)."),
        )
        too_long = F.octet_length(segment) > MAX_PARTITION_SEGMENT_BYTES
        segments.append(F.when(too_long, F.raise_error(message)).otherwise(segment))
    return F.concat_ws("/", *segments)


def _conformed(build: _Build, name: str, *, required: bool) -> Column:
    """Column ``name`` in the table's type; a value that does not fit, or a null where the
    table requires a value, fails the task naming the column, the type and the record key."""
    config = build.config
    target = SPARK_TYPES[config.pa_schema.field(name).type]
    source = F.col(quoted(name))
    if build.source_type(name) == target:
        value = source
        bad = source.isNull() if required else F.lit(False)
    else:
        value = F.expr(f"try_cast({quoted(name)} AS {target})")
        bad = value.isNull() & (source.isNotNull() | F.lit(required))
    if not required and value is source:
        return value
    key = F.coalesce(F.col(quoted(config.record_key)).cast("string"), F.lit("null"))
    message = F.concat(
        build.prefix(),
        F.lit(
            f"the value of column {name!r} does not fit the table type "
            f"{config.pa_schema.field(name).type}{' (required)' if required else ''}, "
            "record key "
        ),
        key,
    )
    return F.when(bad, F.raise_error(message)).otherwise(value)


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _fault_udf() -> Any:
    """A pass-through ``pandas_udf`` reaching the task fault points in the task that
    evaluates it (tests only: without a fault plan a write has no Python hop)."""
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark.sql.functions import pandas_udf  # type: ignore[attr-defined]

    def faults(values: Any) -> Any:
        _task_faults()
        return values

    # PySpark infers the UDF's kind from these (text annotations would not resolve here).
    faults.__annotations__ = {"values": pd.Series, "return": pd.Series}
    return pandas_udf(faults, "int")


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


def _task_faults() -> None:
    """The task fault points, in the task that evaluates the UDF (Spark writes the files
    itself, so "after its commit" is while it writes).

    Raises: InjectedFaultError."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return
    partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    faults.point("spark.task.before_write", partition=partition, attempt=attempt)
    faults.point("spark.task.after_commit", partition=partition, attempt=attempt)


__all__ = [
    "BUCKET_COLUMN",
    "JVM_TEXT_TYPES",
    "PATH_COLUMN",
    "SPARK_TYPES",
    "MetaColumns",
    "file_group_columns",
    "quoted",
]
