"""Shared pieces of the Spark tests: a table schema, rows, and what is on disk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakewarden.api.table import Table
from lakewarden.table.config import FORMAT_VERSION
from lakewarden.table.instant import Transition

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("region", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)


def make_table(
    path: Path, *, buckets: int = 2, partitioned: bool = True, format_version: int = FORMAT_VERSION
) -> Table:
    return Table.create(
        str(path),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"] if partitioned else [],
        ordering_field="ts",
        buckets=buckets,
        format_version=format_version,
    )


def rows(ids: range | list[int], *, ts: int = 1, note: str = "v1") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array(["eu" if i % 3 else "us" for i in ids], pa.string()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
            "note": pa.array([note] * len(ids), pa.string()),
        }
    )


def spark_df(spark: Any, table: pa.Table, partitions: int = 2) -> Any:
    # Through Python rows, not Arrow, so the DataFrame has several partitions.
    return spark.createDataFrame(
        table.to_pylist(), schema="id long, region string, ts long, amount double, note string"
    ).repartition(partitions)


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])


def files_on_disk(root: Path) -> set[str]:
    """Every file under the table root outside ``.lakewarden/``, relative to the root."""
    found = set()
    for directory, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(directory, name), root)
            if not rel.startswith(".lakewarden"):
                found.add(rel)
    return found


def committed_files(table: Table) -> set[str]:
    """Every file named by the write statistics of a completed instant."""
    return {
        stat.path
        for inst in table.timeline()
        if inst.state is Transition.COMPLETED and inst.commit is not None
        for stat in inst.commit.write_stats
    }


def states(table: Table) -> list[Transition]:
    return [inst.state for inst in table.timeline()]
