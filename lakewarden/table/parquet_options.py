"""How lakewarden writes Parquet: one set of writer options for every data file (base files of
writes, table services and the error table, and the files Spark tasks write with pyarrow).

With pyarrow's defaults a copy-on-write table's files are several times larger than with
these options, and writing with these is not slower (`python -m benchmarks spark_read` reports
the bytes beside Spark's own files). Two causes, neither inherent to copy-on-write:

- **Dictionary pages up to 1 MB.** pyarrow dictionary-encodes every column and falls back to
  plain encoding only once a column's dictionary page passes ``dictionary_pagesize_limit``
  (1 MB by default). A file group holds ~125k rows, so a unique column (the record key, ``id``,
  a timestamp, a price) fills most of a 1 MB dictionary before the fallback, and pays for the
  dictionary page *and* an index per value: larger than plain, and the compressor cannot help.
  Spark's writer (parquet-mr) instead drops the dictionary when it does not pay after the first
  page. A 64 KiB limit keeps dictionaries for the columns that repeat (a region, a quantity, a
  SKU: their dictionaries are small) and gives up after ~8k distinct values elsewhere.
- **Snappy.** zstd (level 1, pyarrow's default level) compresses these files about 2x better
  at a similar speed, and every engine that reads Parquet reads it (Spark, DuckDB, Polars,
  pandas, Trino).

What remains inherent: the stored meta columns (``_lw_record_key`` repeats the key as text;
``_lw_commit_time`` is one dictionary entry per file), and copy-on-write's rewrite of every
file group an upsert touches until the cleaner deletes the superseded slices.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

COMPRESSION = "zstd"
DICTIONARY_PAGE_LIMIT = 64 * 1024


def write_options() -> dict[str, Any]:
    """Keyword arguments for ``pq.write_table`` / ``pq.ParquetWriter``."""
    return {"compression": COMPRESSION, "dictionary_pagesize_limit": DICTIONARY_PAGE_LIMIT}


def write_parquet(table: pa.Table, sink: Any) -> None:
    """Write ``table`` as one Parquet file to ``sink`` (a path or a writable file object)."""
    pq.write_table(table, sink, **write_options())


def parquet_writer(sink: Any, schema: pa.Schema) -> pq.ParquetWriter:
    """A ``ParquetWriter`` with the options above, for files written batch by batch."""
    return pq.ParquetWriter(sink, schema, **write_options())


__all__ = [
    "COMPRESSION",
    "DICTIONARY_PAGE_LIMIT",
    "parquet_writer",
    "write_options",
    "write_parquet",
]
