"""The Python routing of ``lakewarden.spark.write``'s merges (``_helper.python_file_groups``),
used where the JVM cannot compute a row's file group (a key or partition column whose Spark
type is not the table's): a bad key fails the write with the error table off, and goes to the
error table (a null file group, left out of the workload profile) with it on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _spark_helpers import make_table

from lakewarden.spark._helper import BUCKET_COLUMN, PARTITION_COLUMN, python_file_groups
from lakewarden.table.bucket import key_buckets, key_strings, render_partition_path
from lakewarden.table.writer import InvalidRecordError

pytestmark = pytest.mark.spark


def keyed_batch() -> pa.RecordBatch:
    # Keys as text, as a DataFrame whose key column is a string would send them: "x" does not
    # fit the table's int64 key, None is a null key.
    return pa.RecordBatch.from_pydict(
        {"id": ["1", None, "x", "4"], "region": ["eu", "us", "eu", None], "note": list("abcd")}
    )


def test_bad_keys_get_a_null_file_group_when_the_error_table_is_on(tmp_path: Path) -> None:
    config = make_table(tmp_path, buckets=4).config
    [out] = list(python_file_groups(config, divert_bad=True)([keyed_batch()]))

    assert out.column(PARTITION_COLUMN).to_pylist() == [
        "region=eu",
        None,
        None,
        render_partition_path(["region"], [None]),  # the default partition
    ]
    good = key_buckets(key_strings(pa.array([1, 4], pa.int64())), 4).to_pylist()
    assert out.column(BUCKET_COLUMN).to_pylist() == [good[0], None, None, good[1]]
    assert out.column("note").to_pylist() == list("abcd")  # every row kept, in order


def test_a_bad_key_fails_the_write_when_the_error_table_is_off(tmp_path: Path) -> None:
    config = make_table(tmp_path, buckets=4).config
    with pytest.raises(InvalidRecordError, match="profiling the write"):
        list(python_file_groups(config, divert_bad=False)([keyed_batch()]))


def test_a_clean_batch_routes_alike_either_way(tmp_path: Path) -> None:
    config = make_table(tmp_path, buckets=4).config
    clean = pa.RecordBatch.from_pydict({"id": ["7", "8"], "region": ["eu", "us"]})
    on = list(python_file_groups(config, divert_bad=True)([clean]))
    off = list(python_file_groups(config, divert_bad=False)([clean]))
    assert [b.to_pydict() for b in on] == [b.to_pydict() for b in off]
    assert on[0].column(BUCKET_COLUMN).null_count == 0
