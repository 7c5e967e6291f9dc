"""Spark's own Delta reader (delta-spark, no lakewarden on its classpath) reads a table that
lakewarden publishes as lakewarden reads it: the latest version and an older one, after
inserts, an upsert, a delete, a clustering and a clean. The reader runs in a Spark session of
its own (a subprocess) with only the delta-spark jars (``make delta-jars``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.table.clean.policy import CleanPolicy

pytestmark = pytest.mark.spark

DELTA_JARS = Path(__file__).resolve().parents[2] / "infra" / "spark" / "delta-jars"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("name", pa.string()),
    ]
)

_READER = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    path, jars, versions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .getOrCreate()
    )
    out = {}
    for version in versions:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        rows = reader.load(path).select("id", "region", "ts", "name").collect()
        out[str(version)] = sorted([list(r) for r in rows], key=lambda r: (r[0], r[1]))
    sql = spark.sql(f"SELECT count(*) FROM delta.`{path}`").collect()[0][0]
    out["sql_count"] = sql
    print("RESULT " + json.dumps(out))
    spark.stop()
    """
)


def rows(*records: tuple[int, str, int, str]) -> pa.Table:
    columns = list(zip(*records, strict=True))
    return pa.Table.from_arrays([pa.array(c) for c in columns], schema=SCHEMA)


def as_lists(table: pa.Table) -> list[list[object]]:
    return sorted(
        ([r["id"], r["region"], r["ts"], r["name"]] for r in table.to_pylist()),
        key=lambda r: (r[0], r[1]),
    )


def test_spark_delta_reader_reads_the_published_log(tmp_path: Path) -> None:
    jars = sorted(DELTA_JARS.glob("*.jar"))
    if not jars:
        pytest.fail(f"no delta-spark jars in {DELTA_JARS}: run `make delta-jars`", pytrace=False)
    root = tmp_path / "orders"
    table = Table.create(
        str(root),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        publish_delta=True,
    )
    table.write(rows(*[(i, "eu" if i % 2 else "us", 1, f"a{i}") for i in range(10)]))
    second = table.write(rows((2, "us", 5, "b2"), (3, "eu", 5, "b3")), "upsert")
    table.write(rows((4, "us", 9, "")), "delete")
    clustering = table.schedule_clustering(sort_by=["ts"])
    assert clustering is not None
    table.run_table_service(clustering)
    table.write(rows((5, "eu", 9, "late")), "upsert")
    # Keeps the snapshots as of the newest 4 writes (from the upsert, version 2, on).
    assert table.clean(CleanPolicy(commits_retained=4, retention_window_s=0)).files_deleted > 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _READER,
            str(root),
            ",".join(str(j) for j in jars),
            json.dumps([None, 2]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    errors = [line for line in done.stderr.splitlines() if "Exception" in line or "Caused" in line]
    assert done.returncode == 0 and lines, "\n".join(errors[:12])
    got = json.loads(lines[0].removeprefix("RESULT "))
    assert got["None"] == as_lists(table.read())
    assert got["2"] == as_lists(table.read(as_of=second.instant))
    assert got["sql_count"] == table.read().num_rows
