"""The driver-owned write through lakewarden's task code (``_python_tasks``): the task UDF is
built once per SparkContext, and the write's spec reaches the tasks as a job property that
does not outlive the write."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import pyspark.sql.pandas.functions
import pytest
from _spark_helpers import make_table, rows, sorted_rows, spark_df

import lakewarden
import lakewarden.spark
from lakewarden.spark import _python_tasks
from lakewarden.spark._options import WriteSpec
from lakewarden.spark._python_tasks import SPEC_PROPERTY, decode_spec, encode_spec


def test_writes_of_one_session_share_one_task_udf(
    spark: Any, table_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_table(table_dir, buckets=2)
    uri = str(table_dir)
    monkeypatch.setattr(_python_tasks, "_udfs", WeakKeyDictionary())
    built: list[object] = []
    real = pyspark.sql.pandas.functions.pandas_udf

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args[0] if args else kwargs.get("f"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pyspark.sql.pandas.functions, "pandas_udf", counting)

    lakewarden.spark.write(spark_df(spark, rows(range(10), ts=1)), uri, "upsert")
    lakewarden.spark.write(spark_df(spark, rows(range(5, 15), ts=2, note="v2")), uri, "upsert")

    assert built == [_python_tasks.write_partition]  # one UDF for both writes
    expected = {r["id"]: r for r in sorted_rows(rows(range(10), ts=1))}
    expected.update({r["id"]: r for r in sorted_rows(rows(range(5, 15), ts=2, note="v2"))})
    assert sorted_rows(lakewarden.read(uri)) == [expected[k] for k in sorted(expected)]


def test_the_spec_property_is_the_writes_only(spark: Any, table_dir: Path) -> None:
    make_table(table_dir)
    uri = str(table_dir)
    context = spark.sparkContext
    lakewarden.spark.write(spark_df(spark, rows(range(4))), uri, "upsert")
    assert context.getLocalProperty(SPEC_PROPERTY) is None
    context.setLocalProperty(SPEC_PROPERTY, "the caller's")
    try:
        lakewarden.spark.write(spark_df(spark, rows(range(4, 8))), uri, "upsert")
        assert context.getLocalProperty(SPEC_PROPERTY) == "the caller's"
    finally:
        context.setLocalProperty(SPEC_PROPERTY, None)
    assert len(lakewarden.read(uri)) == 8


def test_a_spec_travels_as_text_and_nothing_else_decodes_as_one() -> None:
    spec = WriteSpec("file:///t", "20261129000000000", "job-1", "insert", ingest_errors=True)
    assert decode_spec(encode_spec(spec)) == spec
    with pytest.raises(TypeError, match="not a WriteSpec"):
        decode_spec(base64.b64encode(pickle.dumps({"a": 1})).decode())


def test_the_task_function_outside_a_spark_task_says_what_it_needs() -> None:
    with pytest.raises(RuntimeError, match=SPEC_PROPERTY):
        next(_python_tasks.write_partition(iter(())))
