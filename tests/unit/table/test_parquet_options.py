"""The Parquet writer options of every lakewarden data file."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.table.parquet_options import parquet_writer, write_parquet


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([str(i) for i in range(n)]),
            "id": pa.array(range(n), pa.int64()),
            "region": pa.array(["eu", "us", "apac", "latam"] * (n // 4)),
        }
    )


def _bytes(table: pa.Table, **options: object) -> bytes:
    buffer = io.BytesIO()
    if options:
        pq.write_table(table, buffer, **options)  # type: ignore[arg-type]
    else:
        write_parquet(table, buffer)
    return buffer.getvalue()


def test_unique_columns_give_up_their_dictionary_and_files_shrink() -> None:
    table = _rows(100_000)
    data = _bytes(table)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert {c.compression for c in columns.values()} == {"ZSTD"}
    # Against pyarrow's defaults (snappy, dictionary pages up to 1 MB): the repeating column
    # keeps its tiny dictionary, the unique ones stop paying for a dictionary and compress.
    defaults = pq.ParquetFile(io.BytesIO(_bytes(table, compression="snappy"))).metadata
    before = {
        defaults.row_group(0).column(i).path_in_schema: defaults.row_group(0).column(i)
        for i in range(meta.num_columns)
    }
    assert columns["region"].total_compressed_size < 1_000
    for unique in ("key", "id"):
        assert columns[unique].total_compressed_size * 2 < before[unique].total_compressed_size
    assert pq.read_table(io.BytesIO(data)).equals(table)


def test_the_batch_writer_uses_the_same_options() -> None:
    table = _rows(40_000)
    buffer = io.BytesIO()
    with parquet_writer(buffer, table.schema) as writer:
        writer.write_table(table)
    meta = pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata.row_group(0)
    assert meta.column(0).compression == "ZSTD"
    assert pq.read_table(io.BytesIO(buffer.getvalue())).equals(table)
