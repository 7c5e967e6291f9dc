"""What a whole-table read of merge-on-read slices runs beside the merge itself
(``lakewarden.table.mor.read_slices``): a worker thread that prepares the slices' log sides
while pyarrow decodes the base files, and the partition columns a slice's path fixes, which
the read adds at the end instead of decoding and merging them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from lakewarden.table.config import TableConfig
from lakewarden.table.mor_merge import LogSide
from lakewarden.table.reader import partition_values
from lakewarden.table.snapshot import FileSlice

__all__ = ["FixedColumns", "LogSides"]


class LogSides:
    """The log sides (``prepare``: ``mor_merge.prepare_logs`` of a slice's committed blocks)
    of a read's slices, prepared in the order they are submitted by one worker thread while
    the caller waits for base files. The work is mostly reading, CRC-checking and decoding
    log files, much of it outside the GIL, and on S3 waiting for them. A slice's error
    (``MissingCommittedBlockError``, a storage error) is raised by ``get`` of that slice;
    leaving the ``with`` block drops what was not started and waits for what was."""

    def __init__(self, prepare: Callable[[FileSlice], LogSide]) -> None:
        self._prepare = prepare
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakewarden-logs")
        self._futures: dict[int, Future[LogSide]] = {}

    def __enter__(self) -> LogSides:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, position: int, file_slice: FileSlice) -> None:
        """Start preparing ``file_slice``'s log side (nothing when it has no log files)."""
        if file_slice.log_files:
            self._futures[position] = self._pool.submit(self._prepare, file_slice)

    def get(self, position: int) -> LogSide | None:
        """The log side of the slice submitted at ``position`` (None: no log files), waiting
        for it. Raises: what preparing it raised."""
        future = self._futures.get(position)
        return None if future is None else future.result()


class FixedColumns:
    """The partition columns of a read whose value every slice's partition path fixes
    (``lakewarden.table.reader.partition_values``; never the merge key or the ordering
    field), and their columns: one array per value, sliced for each slice (a slice of an
    array costs nothing, a new one a copy of the value per record)."""

    def __init__(
        self, config: TableConfig, slices: Sequence[FileSlice], wanted: Sequence[str], *, key: str
    ) -> None:
        self._schema = config.file_schema
        self._values = {
            path: partition_values(config, path)
            for path in {s.file_group.partition_path for s in slices}
        }
        candidates = set(wanted) & set(config.partition_by) - {key, config.ordering_field}
        self.names = [
            name
            for name in self._schema.names
            if name in candidates and all(name in known for known in self._values.values())
        ]
        self._arrays: dict[tuple[str, Any], pa.Array] = {}

    def add(self, records: pa.Table, file_slice: FileSlice) -> pa.Table:
        """``records`` of ``file_slice`` with the fixed columns appended."""
        for name in self.names:
            value = self._values[file_slice.file_group.partition_path][name]
            records = records.append_column(
                self._schema.field(name), self._column(name, value, len(records))
            )
        return records

    def _column(self, name: str, value: pa.Scalar, rows: int) -> pa.Array:
        cached = self._arrays.get((name, value.as_py()))
        if cached is None or len(cached) < rows:
            # A quarter more than asked: the slices of a partition differ by a few rows, and
            # one array should serve them all.
            cached = pa.repeat(value, rows + rows // 4)
            self._arrays[(name, value.as_py())] = cached
        return cached.slice(0, rows)
