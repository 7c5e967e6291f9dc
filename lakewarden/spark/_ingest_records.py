"""Steps 2-4 of an ingestion (``lakewarden.spark.ingest``): Kafka values parsed into the table
schema, bad records told apart, and what happens to them.

A record is *bad* when its value is null, is not a JSON object (``--format avro``: has a bad
header, an unknown schema fingerprint or a corrupt body, see ``_ingest_avro``), has a field
whose value does not fit the table type (Spark's ``from_json`` fills the corrupt-record
column), lacks the record key, or lacks a required field. With ``bad_records="fail"`` the first
one fails its task (``raise_error`` in the plan: no Python hop for the good rows); with
``"skip"`` a ``mapInArrow`` step writes them to ``<dir>/batch-<B>/part-<P>.jsonl`` and passes
the good rows on; with ``"error-table"`` they travel with the good rows to the writer, which
publishes them as ``ErrorRecord`` events in the same task attempt (``_bad_rows.divert``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from lakewarden.spark._arrow import spark_arrow_schema, spark_schema
from lakewarden.spark._bad_rows import (
    INGEST_KEY,
    INGEST_OFFSET,
    INGEST_PARTITION,
    INGEST_REASON,
    INGEST_TOPIC,
    INGEST_VALUE,
)
from lakewarden.spark._ingest_avro import AvroDecoder, AvroValueCodec
from lakewarden.table.config import TableConfig

BadRecords = Literal["fail", "skip", "error-table"]
ValueFormat = Literal["json", "avro"]
KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")
REASON = "_lw_bad_reason"
CORRUPT = "_lw_corrupt_record"
PARSED = "_lw_parsed"
_MAX_SHOWN = 200


def parse_records(
    raw: DataFrame, config: TableConfig, value_format: ValueFormat = "json"
) -> DataFrame:
    """Kafka rows (``KAFKA_COLUMNS``) -> the table's columns, the Kafka coordinates and
    ``_lw_bad_reason`` (null for a good record). Steps 2-3 of the module docstring.

    Raises: AvroSchemaError (``avro``: a table column Avro cannot carry)."""
    schema = spark_schema(config.pa_schema)
    if value_format == "avro":
        # Every column nullable, as from_json gives them: a bad record's columns are null.
        out = StructType([StructField(f.name, f.dataType, True) for f in schema.fields])
        decoder = AvroDecoder(
            AvroValueCodec.for_table(config), spark_arrow_schema(out), config.record_key
        )
        kafka = raw.select(*KAFKA_COLUMNS)
        out = out.add("topic", "string").add("partition", "integer").add("offset", "long")
        out = out.add("timestamp", "timestamp").add("key", "string").add("value", "string")
        return kafka.mapInArrow(decoder, out.add(REASON, "string"))
    with_corrupt = schema.add(CORRUPT, "string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    text = raw.select(
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp"),
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
    )
    parsed = text.withColumn(PARSED, F.from_json(F.col("value"), with_corrupt, options))
    reason = bad_reason(config)
    columns = [F.col(f"{PARSED}.{name}").alias(name) for name in schema.fieldNames()]
    return parsed.select(*columns, *KAFKA_COLUMNS, reason.alias(REASON))


def bad_reason(config: TableConfig) -> Column:
    """Why a parsed record is bad, or null. The first matching rule wins."""
    row = F.col(PARSED)
    reason = (
        F.when(F.col("value").isNull(), F.lit("empty message (null value)"))
        .when(row.isNull(), F.lit("not a JSON object"))
        .when(
            row.getField(CORRUPT).isNotNull(),
            F.lit("malformed JSON, or a value that does not fit the table schema"),
        )
        .when(
            row.getField(config.record_key).isNull(),
            F.lit(f"missing record key {config.record_key!r}"),
        )
    )
    for required in config.pa_schema:
        if not required.nullable and required.name != config.record_key:
            reason = reason.when(
                row.getField(required.name).isNull(),
                F.lit(f"missing required field {required.name!r}"),
            )
    return reason


def route_bad_records(
    parsed: DataFrame, policy: BadRecords, directory: Path, names: list[str]
) -> DataFrame:
    """The good rows, in the table's columns ``names``. ``fail``: the first bad record raises
    in its task; ``skip``: the tasks write the bad ones under ``directory``; ``error-table``:
    every row, with the ``INGEST_COLUMNS`` that mark the bad ones for the writer (which
    publishes them to the error table with the micro-batch's instant: ``_bad_rows``)."""
    if policy == "error-table":
        return parsed.select(
            *names,
            F.col(REASON).alias(INGEST_REASON),
            F.col("topic").alias(INGEST_TOPIC),
            F.col("partition").alias(INGEST_PARTITION),
            F.col("offset").alias(INGEST_OFFSET),
            F.col("key").cast("string").alias(INGEST_KEY),
            F.col("value").cast("string").alias(INGEST_VALUE),
        )
    if policy == "fail":
        message = F.concat(
            F.lit("lakewarden ingest: bad record at topic "),
            F.col("topic"),
            F.lit(" partition "),
            F.col("partition").cast("string"),
            F.lit(" offset "),
            F.col("offset").cast("string"),
            F.lit(": "),
            F.col(REASON),
            F.lit(": "),
            F.coalesce(F.substring(F.col("value"), 1, _MAX_SHOWN), F.lit("null")),
            F.lit(". Help: fix the producer, or run with --bad-records skip."),
        )
        checked = parsed.filter(
            F.when(F.col(REASON).isNull(), F.lit(True)).otherwise(
                F.raise_error(message).cast("boolean")
            )
        )
        return checked.select(*names)
    directory.mkdir(parents=True, exist_ok=True)
    good_schema = parsed.select(*names).schema
    splitter = BadRecordSplitter(str(directory), names)
    return parsed.mapInArrow(splitter, good_schema)


class BadRecordSplitter:
    """``mapInArrow`` function (pickled to the tasks): good rows through, bad rows to
    ``<dir>/batch-<B>/part-<P>.jsonl``, written whole under a temporary name and renamed."""

    def __init__(self, directory: str, names: list[str]) -> None:
        self.directory = directory
        self.names = names

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bad: list[dict[str, Any]] = []
        for batch in batches:
            reasons = batch.column(REASON)
            is_bad = reasons.is_valid()
            if is_bad.true_count:
                picked = batch.filter(is_bad).select([*KAFKA_COLUMNS, REASON])
                bad.extend(picked.to_pylist())
            yield batch.filter(reasons.is_null()).select(self.names)
        if bad:
            self._save(bad)

    def _save(self, records: list[dict[str, Any]]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        partition = ctx.partitionId() if ctx is not None else 0
        folder = Path(self.directory) / f"batch-{batch or 'none'}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"part-{partition:05d}.jsonl"
        temporary = folder / f".{target.name}.{os.getpid()}.tmp"
        lines = [json.dumps(_bad_line(r, batch), default=str) for r in records]
        temporary.write_text("\n".join(lines) + "\n")
        os.replace(temporary, target)


def _bad_line(record: dict[str, Any], batch: str | None) -> dict[str, Any]:
    line = {name: record[name] for name in KAFKA_COLUMNS}
    line["reason"] = record[REASON]
    line["batch_id"] = int(batch) if batch is not None else None
    return line


def bad_record_files(directory: Path, batch_id: int | None = None) -> list[Path]:
    """The bad-record files of one batch (or of every batch)."""
    pattern = f"batch-{batch_id}/part-*.jsonl" if batch_id is not None else "batch-*/part-*.jsonl"
    return sorted(directory.glob(pattern)) if directory.is_dir() else []


def read_bad_records(directory: Path, batch_id: int | None = None) -> list[dict[str, Any]]:
    """Every bad-record line (of one batch, or of all)."""
    return [
        json.loads(line)
        for path in bad_record_files(directory, batch_id)
        for line in path.read_text().splitlines()
        if line
    ]
