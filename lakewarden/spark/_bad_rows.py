"""Bad rows with the error table on (RFC-20): find every row a batch cannot write, publish
each as an ``ErrorRecord`` and write the rest.

With ``error_table.enabled`` false the task keeps failing on the first bad row
(``lakewarden.spark._arrow.conform``). Enabled, per batch:

1. find the bad rows: a null record key, a null in a required field, a value that does not
   fit its column's table type. A clean batch costs one cast per column, as with the error
   table off (the cast that checks a column is kept for the write); a column
   whose cast fails costs one vectorised pass that applies Arrow's own safe-cast rule
   (``_misfits``: integer bounds, float or timestamp round trips), checked by casting the
   rest; pairs without such a rule (strings, decimals) are bisected: a few casts per bad row;
2. publish one ``ErrorRecord`` per bad row (context: ``lakewarden.errortable.records``), the
   rows read with one ``take``, the parts the events share encoded once per batch
   (``lakewarden.errortable.encoder``), their ids from one read of the OS's randomness;
3. conform the good rows as usual.

A streaming ingestion with ``--bad-records error-table`` hands the writer its bad Kafka
records too, marked by the ``INGEST_COLUMNS`` (why, and the Kafka coordinates): ``divert``
publishes them as ``ErrorRecord`` events with the coordinates in ``context`` and drops the
columns, before the rows are checked as above. They thus share the attempt, the instant and
the exactly-once commit of the micro-batch's good rows.

The task flushes the publisher before its task commit (``flush``): an attempt whose records
are not all durable in Kafka fails, so every accepted attempt's records reach the sink before
its instant completes. The count goes into the commit message (``failed_records``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.errortable import ErrorPublisher, error_record
from lakewarden.errortable import records as ctx
from lakewarden.errortable.encoder import ErrorRecordEncoder, new_uuids, now_ms
from lakewarden.errortable.location import chosen_location
from lakewarden.spark._arrow import conform
from lakewarden.spark._options import WriteSpec
from lakewarden.table.bucket import render_partition_path
from lakewarden.table.config import TableConfig
from lakewarden.table.python_rows import python_rows, python_values
from lakewarden.table.schema_check import needed_columns, values_fit

# What ``lakewarden.spark._ingest_records`` adds to every row of an ingestion that sends its bad
# records to the error table: why the record is bad (null: good), and where it came from.
INGEST_REASON = "_lw_bad_reason"
INGEST_TOPIC = "_lw_kafka_topic"
INGEST_PARTITION = "_lw_kafka_partition"
INGEST_OFFSET = "_lw_kafka_offset"
INGEST_KEY = "_lw_kafka_key"
INGEST_VALUE = "_lw_kafka_value"
INGEST_COLUMNS = (
    INGEST_REASON,
    INGEST_TOPIC,
    INGEST_PARTITION,
    INGEST_OFFSET,
    INGEST_KEY,
    INGEST_VALUE,
)

# ``json.dumps(record, default=str, sort_keys=True)``, the encoder built once.
_RECORD_JSON = json.JSONEncoder(default=str, sort_keys=True)

# Integers Arrow casts to a float without a check: |v| <= 2**mantissa bits (else "not in range").
_FLOAT_EXACT_BITS = {pa.float32(): 24, pa.float64(): 53}


def find_bad_rows(batch: pa.Table, config: TableConfig, operation: str) -> dict[int, str]:
    """Row index -> why it cannot be written (the first problem found for the row)."""
    return typed_bad_rows(batch, config, operation)[0]


def typed_bad_rows(
    batch: pa.Table, config: TableConfig, operation: str
) -> tuple[dict[int, str], pa.Table]:
    """``find_bad_rows``, and ``batch`` with every column whose values all fit cast to its
    table type already (the cast that checks a column is the one the write needs)."""
    bad: dict[int, str] = {}
    for name in needed_columns(config, operation):
        field = config.pa_schema.field(name)
        column = batch.column(name).combine_chunks()
        typed = column if column.type.equals(field.type) else _cast(column, field.type)
        if typed is not None and typed is not column:
            batch = batch.set_column(batch.schema.get_field_index(name), name, typed)
        if typed is None:
            indices = _uncastable(column, field.type)
            for index, value in zip(indices, python_values(column.take(indices)), strict=True):
                bad.setdefault(
                    index,
                    f"value {value!r} of column {name!r} does not fit the table type {field.type}",
                )
        required = name == config.record_key or not field.nullable
        if required and column.null_count:
            what = "a null record key" if name == config.record_key else "a null in required"
            problem = f"{what} field {name!r}"
            for index in pc.indices_nonzero(pc.is_null(column)).to_pylist():
                bad.setdefault(index, f"the record has {problem}")
    return bad, batch


def _cast(values: pa.Array, target: pa.DataType) -> pa.Array | None:
    """``values`` safely cast to ``target``, or None if some value does not fit."""
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _uncastable(values: pa.Array, target: pa.DataType) -> list[int]:
    """Indices of the values that do not cast (``values`` does not fit): the vectorised rule
    if there is one for the pair and every value it passes does cast, else bisection."""
    misfits = _misfits(values, target)
    if misfits is not None and values_fit(values.filter(pc.invert(misfits)), target):
        indices: list[int] = pc.indices_nonzero(misfits).to_pylist()
        return indices
    return _bisect(values, target, 0)


def _misfits(values: pa.Array, target: pa.DataType) -> pa.BooleanArray | None:
    """True where a safe cast of the value to ``target`` fails, by the rule Arrow's cast
    checks (false for nulls); None for a pair without a rule here."""
    source = values.type
    if pa.types.is_integer(source) and pa.types.is_integer(target):
        return _outside(values, *_integer_range(target))
    if pa.types.is_integer(source) and target in _FLOAT_EXACT_BITS:
        bound = 2 ** _FLOAT_EXACT_BITS[target]
        return _outside(values, -bound, bound)
    if (pa.types.is_floating(source) and pa.types.is_integer(target)) or (
        pa.types.is_timestamp(source) and pa.types.is_timestamp(target)
    ):
        # Arrow's check: the value cast and cast back is the value (fails on NaN, fractions,
        # overflow, sub-unit timestamps).
        back = pc.cast(pc.cast(values, target, safe=False), source, safe=False)
        return pc.invert(pc.equal(back, values)).fill_null(False)
    return None


def _integer_range(int_type: pa.DataType) -> tuple[int, int]:
    bits = int_type.bit_width
    if pa.types.is_signed_integer(int_type):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _outside(values: pa.Array, low: int, high: int) -> pa.BooleanArray | None:
    """True where an integer value is not in [low, high]; None if every value of the source
    type is (bounds beyond the source type are not compared: its scalars cannot hold them)."""
    source_low, source_high = _integer_range(values.type)
    checks = []
    if low > source_low:
        checks.append(pc.less(values, pa.scalar(low, values.type)))
    if high < source_high:
        checks.append(pc.greater(values, pa.scalar(high, values.type)))
    if not checks:
        return None
    outside = checks[0] if len(checks) == 1 else pc.or_(*checks)
    return outside.fill_null(False)


def _bisect(values: pa.Array, target: pa.DataType, offset: int) -> list[int]:
    """Indices (plus ``offset``) of the values that do not cast; ``values`` does not fit."""
    if len(values) == 1:
        return [offset]
    mid = len(values) // 2
    out: list[int] = []
    for start, part in ((0, values.slice(0, mid)), (mid, values.slice(mid))):
        if len(part) and not values_fit(part, target):
            out.extend(_bisect(part, target, offset + start))
    return out


def _keep(num_rows: int, bad: Collection[int]) -> pa.BooleanArray:
    """The filter that leaves out the rows ``bad``."""
    flags = bytearray(b"\x01") * num_rows
    for index in bad:
        flags[index] = 0
    as_bytes = pa.Array.from_buffers(pa.uint8(), num_rows, [None, pa.py_buffer(flags)])
    keep: pa.BooleanArray = as_bytes.cast(pa.bool_())
    return keep


class BadRows:
    """One task attempt's diverted rows (steps in the module doc)."""

    def __init__(
        self, spec: WriteSpec, config: TableConfig, attempt_id: str, *, where: str
    ) -> None:
        self.spec = spec
        self.config = config
        self.attempt_id = attempt_id
        self.where = where
        settings = spec.settings()
        self.publisher = ErrorPublisher(settings, producer_id=f"spark-task:{attempt_id}")
        self.count = 0
        self.location = chosen_location(spec.uri, config, settings, spec.error_table)

    def conform(self, batch: pa.Table, first_row: int) -> pa.Table:
        """The good rows of ``batch`` conformed; the bad ones published. Raises:
        SchemaMismatchError, EventDeliveryError (the broker refused a record)."""
        bad, batch = typed_bad_rows(batch, self.config, self.spec.operation)  # 1.
        if bad:
            self._publish(batch, bad, first_row)  # 2.
            batch = batch.filter(_keep(batch.num_rows, bad))
            self.count += len(bad)
        return conform(  # 3.
            batch, self.config, self.spec.operation, first_row=first_row, where=self.where
        )

    def divert(self, batch: pa.Table) -> pa.Table:
        """The good records of an ingestion batch, without the ``INGEST_COLUMNS``; the bad
        ones published with their Kafka coordinates. Raises: EventDeliveryError."""
        reasons = batch.column(INGEST_REASON)
        is_bad = pc.is_valid(reasons)
        bad = batch.filter(is_bad).select(list(INGEST_COLUMNS)).to_pylist()
        for row in bad:
            self._publish_kafka(row)
        self.count += len(bad)
        return batch.filter(pc.invert(is_bad)).drop_columns(list(INGEST_COLUMNS))

    def _publish_kafka(self, row: dict[str, Any]) -> None:
        config, spec = self.config, self.spec
        context = {
            ctx.COMMIT_TIME: spec.instant,
            ctx.TABLE_NAME: config.name,
            ctx.TABLE_ID: config.table_id,
            ctx.TABLE_URI: spec.uri,
            ctx.PARTITION_PATH: "",
            ctx.RECORD_KEY: "",
            ctx.TASK_ATTEMPT: self.attempt_id,
            ctx.JOB_ID: spec.job_id,
            "operation": spec.operation,
            ctx.KAFKA_TOPIC: str(row[INGEST_TOPIC]),
            ctx.KAFKA_PARTITION: str(row[INGEST_PARTITION]),
            ctx.KAFKA_OFFSET: str(row[INGEST_OFFSET]),
            **self.location,
        }
        self.publisher.publish(
            error_record(
                table_id=config.table_id,
                producer_id=self.publisher.producer_id,
                record={"key": row[INGEST_KEY], "value": row[INGEST_VALUE]},
                schema=None,
                message=ctx.kafka_record_message(
                    row[INGEST_TOPIC], row[INGEST_PARTITION], row[INGEST_OFFSET], row[INGEST_REASON]
                ),
                context=context,
            )
        )

    def _publish(self, batch: pa.Table, bad: dict[int, str], first_row: int) -> None:
        """One ``ErrorRecord`` per bad row, in row order; what the rows share (the schema
        text, most of the context) is encoded once per batch (``ErrorRecordEncoder``)."""
        config, spec = self.config, self.spec
        indices = sorted(bad)
        records = python_rows(batch.take(indices))
        encoder = ErrorRecordEncoder(
            table_id=config.table_id,
            producer_id=self.publisher.producer_id,
            schema=json.dumps({f.name: str(f.type) for f in batch.schema}),
            shared_context={
                ctx.COMMIT_TIME: spec.instant,
                ctx.TABLE_NAME: config.name,
                ctx.TABLE_ID: config.table_id,
                ctx.TABLE_URI: spec.uri,
                ctx.TASK_ATTEMPT: self.attempt_id,
                ctx.JOB_ID: spec.job_id,
                "operation": spec.operation,
                **self.location,
            },
        )
        ids = new_uuids(2 * len(indices))
        ts_ms = now_ms()
        for n, (index, record) in enumerate(zip(indices, records, strict=True)):
            row_number = first_row + index
            key = record.get(config.record_key)
            value = encoder.encode(
                event_id=ids[2 * n],
                uid=ids[2 * n + 1],
                ts_ms=ts_ms,
                record=_RECORD_JSON.encode(record),
                message=ctx.task_row_message(self.where, row_number, bad[index]),
                context={
                    ctx.PARTITION_PATH: self._partition_path(record),
                    ctx.RECORD_KEY: "" if key is None else str(key),
                    "rowIndex": str(row_number),
                },
            )
            self.publisher.publish_encoded(value, key=encoder.key)

    def _partition_path(self, record: dict[str, Any]) -> str:
        fields = self.config.partition_by
        if not fields:
            return ""
        try:
            values = [record.get(f) for f in fields]
            return render_partition_path(fields, [None if v is None else str(v) for v in values])
        except Exception:  # noqa: BLE001 - context only; the record itself is what matters
            return ""

    def flush(self) -> None:
        """Raises: EventDeliveryError (the attempt must fail)."""
        self.publisher.flush()

    def close(self) -> None:
        self.publisher.close()
