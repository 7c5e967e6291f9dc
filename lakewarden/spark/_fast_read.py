"""``lakewarden.spark.read(spark, uri, ...)``: a table read by Spark's own Parquet reader.

A snapshot of a copy-on-write table is exactly a list of Parquet files, and so is every
merge-on-read slice without log blocks. This read plans on the driver (``plan_read``: the
timeline decides the files, nothing is listed) and hands that list to
``spark.read.parquet``, so the rows never pass through Python: Spark's vectorised reader,
column pruning, filter pushdown into the Parquet row groups, and aggregate pushdown apply as
to any Parquet table. Only the slices whose log blocks must be merged with their base file go
through the Python data source (``_reader``), pinned to the same instant, and the two are
united. ``spark.read.format("lakewarden")`` reaches Spark's reader another way: PySpark 4.0's
Python Data Source API cannot hand a scan to a JVM reader, so the format's JVM side
(``lakewarden/spark/java/``, ``LakewardenSource``) takes snapshot reads a read manifest
vouches for (``lakewarden.table.read_manifest``) and leaves the rest to the Python source.

Partition columns: the data files hold every column, partition columns included. When every
partition column is a string, an integer or a date and no file sits in the default partition
(where a null and an empty string share one directory), Spark also takes them from the
``k=v`` directories (``basePath`` = the table root), so a filter on them prunes whole files on
the driver (``PartitionFilters`` in the plan). Otherwise Spark reads them from the files, and
a filter on them still skips row groups by their statistics.

Storage: local tables are read as ``file://`` paths, S3 tables as ``s3a://bucket/key``
through Hadoop's S3A (``infra/spark/pom.xml`` fetches it into ``infra/spark/jars``; put those
jars in ``spark.jars``). Endpoint, region and credentials of lakewarden's settings, where set,
are given to S3A for the table's bucket only (``fs.s3a.bucket.<bucket>.*`` in the session's
Hadoop configuration, never in the plan); unset, S3A's own configuration applies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import reduce
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from lakewarden.errors import ConfigurationError, NonRetryableError
from lakewarden.settings import Settings
from lakewarden.spark._arrow import spark_schema
from lakewarden.spark._options import (
    OPT_AS_OF,
    OPT_COLUMNS,
    OPT_SETTINGS,
    OPT_SINCE,
    OPT_SLICES,
    OPT_UNTIL,
    SLICES_MERGED,
    InvalidOptionError,
    encode_settings,
)
from lakewarden.spark._read_plan import ReadPlan, plan_read
from lakewarden.spark._reader import table_arrow_schema
from lakewarden.storage import Storage, open_storage
from lakewarden.storage.local import LocalStorage
from lakewarden.table.bucket import MalformedPartitionPathError, parse_partition_path
from lakewarden.table.config import META_COMMIT_TIME, TableConfig, load_config
from lakewarden.table.stats import WriteStat

log = logging.getLogger("lakewarden.spark")

# Characters Hadoop's glob treats as patterns; Spark globs every path that has one.
_GLOB_CHARS = frozenset("\\{}[]*?")


class S3AUnavailableError(NonRetryableError):
    """Spark has no S3A file system: the S3 table's files cannot be handed to its reader."""


def read(
    spark: Any,
    uri: str,
    *,
    as_of: str | None = None,
    since: str | None = None,
    columns: Sequence[str] | None = None,
    settings: Settings | None = None,
) -> DataFrame:
    """The table at ``uri`` as a DataFrame read by Spark's Parquet reader: the latest
    snapshot, the snapshot ``as_of`` a completed instant, or the records written after
    ``since`` (an incremental read, as ``option("since", ...)`` of the format). ``columns``
    narrows the columns (Spark also prunes by itself what a query does not use).

    The files are fixed now, on the driver: later commits are not seen by this DataFrame.

    Raises: InvalidOptionError (``as_of`` with ``since``), NotATableError,
    InstantNotCompletedError, InstantCleanedError, ColumnNotFoundError, ConfigurationError,
    S3AUnavailableError (an S3 table and a session without S3A)."""
    if as_of is not None and since is not None:
        raise InvalidOptionError(
            "as_of and since exclude each other: as_of reads a snapshot, since reads the "
            "changes after an instant up to the latest."
        )
    storage = open_storage(uri, settings)
    config = load_config(storage)
    schema = table_arrow_schema(config, columns)
    plan = plan_read(storage, config, as_of=as_of, since=since)
    names = list(schema.names)
    if not plan.files and not plan.merged:
        empty: DataFrame = spark.createDataFrame([], spark_schema(schema))
        return empty
    if not _natively_readable(config.pa_schema):
        log.info("read %s: types Spark's Parquet reader cannot take; Python read", uri)
        return _python_frame(spark, uri, plan, since, names, settings, merged_only=False)
    frames = []
    if plan.files:
        frames.append(_parquet_frame(spark, storage, config, plan))
    if plan.merged:
        frames.append(_python_frame(spark, uri, plan, since, names, settings, merged_only=True))
    log.info(
        "read %s as of %s: %d files by Spark's Parquet reader, %d merge-on-read slices "
        "merged in Python",
        uri,
        plan.as_of,
        len(plan.files),
        len(plan.merged),
    )
    return reduce(DataFrame.unionByName, (f.select(*names) for f in frames))


def _natively_readable(schema: pa.Schema) -> bool:
    """Whether Spark's Parquet reader reads every column into the type the table gives
    Spark: flat columns of the types below (a nanosecond timestamp, an unsigned integer or a
    nested column goes through Python, which casts)."""
    for field in schema:
        t = field.type
        if pa.types.is_timestamp(t):
            if t.unit not in ("ms", "us"):
                return False
        elif not (
            pa.types.is_boolean(t)
            or pa.types.is_signed_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_date32(t)
            or pa.types.is_decimal128(t)
        ):
            return False
    return True


def _parquet_frame(spark: Any, storage: Storage, config: TableConfig, plan: ReadPlan) -> DataFrame:
    """The plain files of ``plan`` through ``spark.read.parquet``, in the table's types.

    Raises: S3AUnavailableError."""
    from pyspark.sql import functions as sf

    root = spark_root(spark, storage)
    fields = list(spark_schema(config.pa_schema).fields)
    if plan.instants is not None:
        fields.append(StructField(META_COMMIT_TIME, StringType(), nullable=False))
    reader = spark.read.schema(StructType(fields))
    if directory_partitioning(config, plan.files):
        reader = reader.option("basePath", root)
    paths = [_glob_escaped(f"{root}/{stat.path}") for stat in plan.files]
    try:
        frame: DataFrame = reader.parquet(*paths)
    except Exception as err:
        if root.startswith("s3a:") and _is_missing_s3a(err):
            raise S3AUnavailableError(
                f"Spark cannot read {root}: it has no S3A file system ({_first_line(err)}). "
                "Help: fetch the jars (`make spark-jars`, infra/spark/pom.xml) and start the "
                "session with them in spark.jars (lakewarden.spark.ingest.kafka_jars() lists "
                "them), or read with spark.read.format('lakewarden').",
                table=config.name,
            ) from err
        raise
    if plan.instants is not None:
        frame = frame.where(sf.col(META_COMMIT_TIME).isin(list(plan.instants)))
        frame = frame.drop(META_COMMIT_TIME)
    return frame


def directory_partitioning(config: TableConfig, files: Sequence[WriteStat]) -> bool:
    """Whether Spark may take the partition columns from the ``k=v`` directories of
    ``files``: every partition column is a string, an integer or a date (whose text Spark
    parses back to the same value), and no string column has a file in the default partition
    (lakewarden writes null and '' there alike; Spark would read both as null)."""
    if not config.partition_by:
        return False
    types = [config.pa_schema.field(name).type for name in config.partition_by]
    strings = [pa.types.is_string(t) or pa.types.is_large_string(t) for t in types]
    if not all(
        s or pa.types.is_signed_integer(t) or pa.types.is_date32(t)
        for s, t in zip(strings, types, strict=True)
    ):
        return False
    for stat in files:
        try:
            values = parse_partition_path(stat.file_group.partition_path, config.partition_by)
        except MalformedPartitionPathError:
            return False
        if any(v is None and s for v, s in zip(values, strings, strict=True)):
            return False
    return True


def spark_root(spark: Any, storage: Storage) -> str:
    """The table root as Spark names it (``file:///...`` or ``s3a://bucket/prefix``); for S3,
    the settings' endpoint and credentials are handed to S3A for the bucket.

    Raises: ConfigurationError (a storage Spark cannot reach)."""
    if isinstance(storage, LocalStorage):
        # Not Path.as_uri(): Hadoop's Path keeps '%' literal, so percent-encoding would name
        # another file (partition directories hold Hive escapes such as %2F themselves).
        return "file://" + storage.root.as_posix()
    from lakewarden.storage.s3 import S3Storage

    if isinstance(storage, S3Storage):
        configure_s3a(spark, storage)
        return f"s3a://{storage.bucket}/{storage.prefix}".rstrip("/")
    raise ConfigurationError(f"Spark cannot read a table on {storage!r}: local paths and S3 only")


def configure_s3a(spark: Any, storage: Any) -> None:
    """S3A settings for ``storage``'s bucket from lakewarden's S3 settings, those that are
    set (a Spark Connect session has no Hadoop configuration to set: it keeps its own)."""
    context = getattr(spark, "_jsc", None)
    if context is None:
        return
    conf = context.hadoopConfiguration()
    s3 = storage.settings
    prefix = f"fs.s3a.bucket.{storage.bucket}."
    if s3.endpoint_url:
        conf.set(prefix + "endpoint", s3.endpoint_url)
        # An endpoint of its own is SeaweedFS, MinIO or a gateway: path-style addressing, and
        # the scheme of the URL decides TLS.
        conf.set(prefix + "path.style.access", "true")
        conf.set(
            prefix + "connection.ssl.enabled", str(s3.endpoint_url.startswith("https")).lower()
        )
    conf.set(prefix + "endpoint.region", s3.region)
    if s3.access_key_id is not None and s3.secret_access_key is not None:
        conf.set(prefix + "access.key", s3.access_key_id.get_secret_value())
        conf.set(prefix + "secret.key", s3.secret_access_key.get_secret_value())
        conf.set(
            prefix + "aws.credentials.provider",
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        )


def _python_frame(
    spark: Any,
    uri: str,
    plan: ReadPlan,
    since: str | None,
    names: Sequence[str],
    settings: Settings | None,
    *,
    merged_only: bool,
) -> DataFrame:
    """The Python data source's read, pinned to ``plan.as_of``."""
    import lakewarden.spark

    lakewarden.spark.register(spark)
    reader = spark.read.format(lakewarden.spark.FORMAT).option(OPT_COLUMNS, ",".join(names))
    if since is not None:
        reader = reader.option(OPT_SINCE, since).option(OPT_UNTIL, plan.as_of)
    else:
        reader = reader.option(OPT_AS_OF, plan.as_of)
    if merged_only:
        reader = reader.option(OPT_SLICES, SLICES_MERGED)
    if settings is not None:
        reader = reader.option(OPT_SETTINGS, encode_settings(settings))
    frame: DataFrame = reader.load(uri)
    return frame


def _glob_escaped(path: str) -> str:
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in path)


def _is_missing_s3a(err: Exception) -> bool:
    text = str(err)
    return "S3AFileSystem" in text or 'No FileSystem for scheme "s3a"' in text


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
