"""Publishing reads a data file's Parquet footer with ranged reads of the file's end, never
the whole file, on a store without local paths (S3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.publish.stats import read_footer
from lakewarden.storage._forwarding import ForwardingStorage, Operation
from lakewarden.storage.local import LocalStorage

T = TypeVar("T")


class Counting(ForwardingStorage):
    """Records every operation; no local paths (as S3)."""

    def __init__(self, inner: LocalStorage) -> None:
        super().__init__(inner)
        self.calls: list[tuple[Operation, str]] = []
        self.bytes_read = 0

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        self.calls.append((op, key))
        result = call()
        if op in ("read", "read_range") and isinstance(result, bytes):
            self.bytes_read += len(result)
        return result

    def local_path(self, key: str) -> str | None:
        return None


def test_the_footer_is_read_from_the_end_of_the_file_alone(tmp_path: Path) -> None:
    inner = LocalStorage(tmp_path / "root")
    n = 200_000
    table = pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"v{i}" for i in range(n)]})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=50_000)
    data = sink.getvalue().to_pybytes()
    inner.write("p/f.parquet", data)
    storage = Counting(inner)
    footer = read_footer(storage, "p/f.parquet")
    assert footer.num_rows == n and footer.num_row_groups == 4
    assert ("read", "p/f.parquet") not in storage.calls
    assert storage.bytes_read <= 64 * 1024 < len(data) // 10
