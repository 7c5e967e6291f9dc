"""What the Delta log tests compare, written against the readers and the log's JSON only:
nothing here imports ``lakewarden.publish``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltalake
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import lakewarden
from lakewarden.api.table import Table
from lakewarden.table.clean.cleaned import InstantCleanedError

Rows = set[tuple[Any, ...]]


def row_set(table: pa.Table, columns: list[str]) -> Rows:
    return {tuple(r[c] for c in columns) for r in table.select(columns).to_pylist()}


def polars_rows(frame: pl.DataFrame, columns: list[str]) -> Rows:
    return {tuple(r[c] for c in columns) for r in frame.select(columns).to_dicts()}


def log_versions(root: Path) -> list[int]:
    names = sorted(p.name for p in (root / "_delta_log").glob("*.json"))
    return [int(n.split(".")[0]) for n in names]


def commit_lines(root: Path, version: int) -> list[dict[str, Any]]:
    text = (root / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def instant_of(root: Path, version: int) -> str | None:
    """The lakewarden instant a Delta version names in its commitInfo (None: version 0)."""
    for action in commit_lines(root, version):
        if "commitInfo" in action:
            value = action["commitInfo"]["operationParameters"].get("instant")
            return value if isinstance(value, str) else None
    raise AssertionError(f"version {version} has no commitInfo")


def assert_latest_matches(table: Table, root: Path) -> None:
    """deltalake and Polars read the latest version as lakewarden reads the table."""
    columns = table.schema.names
    expected = row_set(lakewarden.read(str(root)), columns)
    delta = deltalake.DeltaTable(str(root))
    assert row_set(delta.to_pyarrow_table(), columns) == expected
    assert polars_rows(pl.read_delta(str(root)), columns) == expected
    assert polars_rows(pl.scan_delta(str(root)).collect(), columns) == expected


def assert_every_version_matches(table: Table, root: Path, *, read_optimized: bool) -> int:
    """Every version that a clean left readable reads as lakewarden as of its instant (on a
    merge-on-read table: the base files of that snapshot). Returns how many versions were
    compared."""
    columns = table.schema.names
    compared = 0
    versions = log_versions(root)
    assert versions == list(range(len(versions))), "the Delta log has a gap"
    for version in versions:
        instant = instant_of(root, version)
        try:
            if instant is None:
                expected: Rows = set()
            elif read_optimized:
                expected = base_file_rows(table, instant, columns)
            else:
                expected = row_set(lakewarden.read(str(root), as_of=instant), columns)
        except (InstantCleanedError, FileNotFoundError):
            continue
        delta = deltalake.DeltaTable(str(root), version=version)
        assert row_set(delta.to_pyarrow_table(), columns) == expected, f"version {version}"
        compared += 1
    return compared


def base_file_rows(table: Table, instant: str, columns: list[str]) -> Rows:
    """A merge-on-read table's read-optimized view as of ``instant``: the rows of the base
    files of its snapshot, log files left out."""
    rows: Rows = set()
    for stat in table.snapshot(instant).base_files():
        path = table.storage.local_path(stat.path)
        assert path is not None
        rows |= row_set(pq.ParquetFile(path).read(), columns)
    return rows


def adds_and_removes(root: Path) -> tuple[list[str], list[str]]:
    adds: list[str] = []
    removes: list[str] = []
    for version in log_versions(root):
        for action in commit_lines(root, version):
            if "add" in action:
                adds.append(action["add"]["path"])
            if "remove" in action:
                removes.append(action["remove"]["path"])
    return adds, removes
