"""Bad rows with the error table on (RFC-20): find every row a batch cannot write, publish
each as an ``ErrorRecord`` and write the rest.

With ``error_table.enabled`` false the task keeps failing on the first bad row
(``lakewarden.spark._arrow.conform``). Enabled, per batch:

1. find the bad rows: a null record key, a null in a required field, a value that does not
   fit its column's table type (found by bisection: a few casts per bad row, none when the
   batch is clean, which is the common case and costs one cast per column as before);
2. publish one ``ErrorRecord`` per bad row (context: ``lakewarden.errortable.records``);
3. conform the good rows as usual.

The task flushes the publisher before its task commit (``flush``): an attempt whose records
are not all durable in Kafka fails, so every accepted attempt's records reach the sink before
its instant completes. The count goes into the commit message (``failed_records``).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.errortable import ErrorPublisher, error_record
from lakewarden.errortable import records as ctx
from lakewarden.spark._arrow import conform, needed_columns
from lakewarden.spark._options import WriteSpec
from lakewarden.table.bucket import render_partition_path
from lakewarden.table.config import TableConfig


def find_bad_rows(batch: pa.Table, config: TableConfig, operation: str) -> dict[int, str]:
    """Row index -> why it cannot be written (the first problem found for the row)."""
    bad: dict[int, str] = {}
    for name in needed_columns(config, operation):
        field = config.pa_schema.field(name)
        column = batch.column(name).combine_chunks()
        if not column.type.equals(field.type) and not _fits(column, field.type):
            for index in _uncastable(column, field.type, 0):
                value = column[index].as_py()
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
    return bad


def _fits(values: pa.Array, target: pa.DataType) -> bool:
    try:
        values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _uncastable(values: pa.Array, target: pa.DataType, offset: int) -> list[int]:
    """Indices (plus ``offset``) of the values that do not cast; ``values`` does not fit."""
    if len(values) == 1:
        return [offset]
    mid = len(values) // 2
    out: list[int] = []
    for start, part in ((0, values.slice(0, mid)), (mid, values.slice(mid))):
        if len(part) and not _fits(part, target):
            out.extend(_uncastable(part, target, offset + start))
    return out


class BadRows:
    """One task attempt's diverted rows (steps in the module doc)."""

    def __init__(
        self, spec: WriteSpec, config: TableConfig, attempt_id: str, *, where: str
    ) -> None:
        self.spec = spec
        self.config = config
        self.attempt_id = attempt_id
        self.where = where
        self.publisher = ErrorPublisher(spec.settings(), producer_id=f"spark-task:{attempt_id}")
        self.count = 0

    def conform(self, batch: pa.Table, first_row: int) -> pa.Table:
        """The good rows of ``batch`` conformed; the bad ones published. Raises:
        SchemaMismatchError, EventDeliveryError (the broker refused a record)."""
        bad = find_bad_rows(batch, self.config, self.spec.operation)  # 1.
        if bad:
            for index, problem in sorted(bad.items()):
                self._publish(batch, index, first_row + index, problem)  # 2.
            keep = pa.array([i not in bad for i in range(batch.num_rows)])
            batch = batch.filter(keep)
            self.count += len(bad)
        return conform(  # 3.
            batch, self.config, self.spec.operation, first_row=first_row, where=self.where
        )

    def _publish(self, batch: pa.Table, index: int, row_number: int, problem: str) -> None:
        config, spec = self.config, self.spec
        record = batch.slice(index, 1).to_pylist()[0]
        key = record.get(config.record_key)
        try:
            values = [record.get(f) for f in config.partition_by]
            partition = render_partition_path(
                config.partition_by, [None if v is None else str(v) for v in values]
            )
        except Exception:  # noqa: BLE001 - context only; the record itself is what matters
            partition = ""
        context = {
            ctx.COMMIT_TIME: spec.instant,
            ctx.TABLE_NAME: config.name,
            ctx.TABLE_ID: config.table_id,
            ctx.TABLE_URI: spec.uri,
            ctx.PARTITION_PATH: partition,
            ctx.RECORD_KEY: "" if key is None else str(key),
            ctx.TASK_ATTEMPT: self.attempt_id,
            ctx.JOB_ID: spec.job_id,
            "operation": spec.operation,
            "rowIndex": str(row_number),
        }
        schema = {f.name: str(f.type) for f in batch.schema}
        self.publisher.publish(
            error_record(
                table_id=config.table_id,
                producer_id=self.publisher.producer_id,
                record=record,
                schema=json.dumps(schema),
                message=f"{self.where}, row {row_number} of the task's input: {problem}",
                context=context,
            )
        )

    def flush(self) -> None:
        """Raises: EventDeliveryError (the attempt must fail)."""
        self.publisher.flush()

    def close(self) -> None:
        self.publisher.close()
