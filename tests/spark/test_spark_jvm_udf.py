"""The Java UDFs (``lakewarden.spark._jvm_udf``) compute exactly what the Python routing
functions compute: a key's bucket (existing tables keep reading and upserting as before) and
a partition value's escaping; and a table written through them is the Python path's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import committed_files, files_on_disk, states

import lakewarden
import lakewarden.spark
from lakewarden.spark import _jvm_udf
from lakewarden.table.bucket import escape_partition_value, key_buckets, key_strings
from lakewarden.table.instant import Transition

pytestmark = pytest.mark.spark

# Empty, ASCII, 2-, 3- and 4-byte UTF-8 (a surrogate pair in Java), long, every unsafe
# character, control characters, and numbers as text.
SPECIAL = [
    "",
    "a",
    "é",
    "日本語のキー",
    "emoji-😀-key",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "x" * 5000,
    "ü" * 1000 + "😀" * 300,
    "a/b=c%d:e#f?g*h'i\"j\\k{l[m]n^o\x7fp",
    "tab\there\nnewline\x00nul",
    "-1",
    "9223372036854775807",
    " leading and trailing ",
]


def _keys() -> list[str]:
    generated = [f"key-{i}-{'ß' * (i % 7)}{chr(0x4E00 + i % 500)}" for i in range(2000)]
    return SPECIAL + generated + [str(i) for i in range(-500, 500)]


def test_jvm_bucket_is_the_python_bucket(spark: Any) -> None:
    _jvm_udf.register(spark)
    keys = _keys()
    df = spark.createDataFrame([(k,) for k in keys] + [(None,)], "k string")
    counts = [1, 2, 3, 4, 7, 16, 256, 1009]
    got = df.select("k", *[_jvm_udf.key_bucket(df.k, n).alias(f"b{n}") for n in counts]).collect()
    by_key = {row["k"]: row for row in got}
    text = key_strings(pa.array(keys + [None], pa.string()))
    for n in counts:
        expected = key_buckets(text, n).to_pylist()
        assert [by_key[k][f"b{n}"] for k in keys + [None]] == expected, n


def test_jvm_partition_value_is_the_python_escaping(spark: Any) -> None:
    _jvm_udf.register(spark)
    values = SPECIAL + [chr(c) for c in range(0, 256)] + [None]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, v string")
    got = [r[1] for r in sorted(df.select("i", _jvm_udf.partition_value(df.v)).collect())]
    assert got == [escape_partition_value(v) for v in values]


SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        ("part", pa.string()),
        ("ts", pa.int64()),
        ("note", pa.string()),
    ]
)
PARTS = ["eu", "a/b=c", "日本", "", None, "50%"]


def _table(path: Path) -> lakewarden.Table:
    return lakewarden.Table.create(
        str(path),
        name="keys",
        record_key="key",
        schema=SCHEMA,
        partition_by=["part"],
        ordering_field="ts",
        buckets=4,
    )


def _rows(keys: list[str], *, ts: int, note: str) -> pa.Table:
    return pa.table(
        {
            "key": keys,
            "part": [PARTS[i % len(PARTS)] for i in range(len(keys))],
            "ts": [ts] * len(keys),
            "note": [note] * len(keys),
        },
        schema=SCHEMA,
    )


def _df(spark: Any, data: pa.Table) -> Any:
    schema = "key string, part string, ts long, note string"
    return spark.createDataFrame(data.to_pylist(), schema=schema).repartition(2)


def _groups(table: lakewarden.Table) -> dict[tuple[str, str], tuple[str, str]]:
    """Per committed record (partition path, key text): its (partition path, bucket prefix)
    from the meta columns."""
    data = table.read(with_meta=True)
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for row in data.to_pylist():
        path = row["_lw_partition_path"]
        out[(path, row["_lw_record_key"])] = (path, row["_lw_file_name"][:9])
    return out


def test_fast_path_table_reads_and_upserts_as_the_python_path(spark: Any, tmp_path: Path) -> None:
    keys = SPECIAL[:8] + [f"k-{i}-é" for i in range(120)]
    data = _rows(keys, ts=1, note="v1")
    fast, python = _table(tmp_path / "fast"), _table(tmp_path / "python")
    lakewarden.spark.write(_df(spark, data), fast.uri, "bulk_insert", options={"writer": "spark"})
    lakewarden.spark.write(
        _df(spark, data), python.uri, "bulk_insert", options={"writer": "python"}
    )
    assert states(fast) == [Transition.COMPLETED]
    assert _groups(fast) == _groups(python)
    assert files_on_disk(tmp_path / "fast") == committed_files(fast)

    # The same keys in the same partitions (keys are unique per partition), newer values.
    picked = data.take(list(range(0, len(keys), 3)))
    changed = picked.set_column(2, "ts", pa.array([2] * len(picked), pa.int64()))
    changed = changed.set_column(3, "note", pa.array(["v2"] * len(picked), pa.string()))
    for table in (fast, python):
        lakewarden.spark.write(_df(spark, changed), table.uri, "upsert")
    fast_rows = _sorted(lakewarden.read(fast.uri))
    assert fast_rows == _sorted(lakewarden.read(python.uri))
    assert len(fast_rows) == len(keys)
    assert sum(1 for r in fast_rows if r["note"] == "v2") == len(keys[::3])
    # The upsert merged each bucket into one file group, alike on both tables.
    assert _groups(fast) == _groups(python)


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: (r["key"], r["part"] or ""))
