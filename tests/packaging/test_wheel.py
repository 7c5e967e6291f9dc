"""The wheel as a user installs it, in a fresh virtualenv, run from outside the checkout.

Without extras: a local table is written and read, the event schemas load from the package,
the CLI runs, and an S3 URI or a service command fails with the error naming its extra.
With ``[spark]``: a Spark write and read in local mode, the format found by Spark without
``register`` (the ``pyspark_lakewarden`` module) and the Java UDFs built from the sources the
wheel ships.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from _venvs import Venv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

CORE_SCRIPT = """
import json, sys, tempfile
import pyarrow as pa
import lakewarden
from lakewarden.errors import MissingExtraError
from lakewarden.events import decode, encode, sample_events

root = tempfile.mkdtemp() + "/orders"
schema = pa.schema([("id", pa.string()), ("amount", pa.int64())])
table = lakewarden.Table.create(root, name="orders", record_key="id", schema=schema)
table.write(pa.table({"id": ["a", "b"], "amount": [1, 2]}, schema=schema))
table.write(pa.table({"id": ["a"], "amount": [3]}, schema=schema), operation="upsert")
rows = lakewarden.read(root).sort_by("id").to_pylist()

event = sample_events()["Heartbeat"]  # the schemas are package data
assert decode(encode("Heartbeat", event)).name == "Heartbeat"

try:
    lakewarden.Table.open("s3://bucket/orders")
    s3 = "opened"
except MissingExtraError as err:
    s3 = str(err)
print(json.dumps({"rows": rows, "s3": s3, "root": root, "module": lakewarden.__file__}))
"""

SPARK_SCRIPT = """
import json, os, sys, tempfile
os.environ["PYSPARK_PYTHON"] = sys.executable
import pyarrow as pa
from pyspark.sql import SparkSession
import lakewarden, lakewarden.spark

root = tempfile.mkdtemp() + "/orders"
schema = pa.schema([("id", pa.string()), ("amount", pa.int64())])
lakewarden.Table.create(root, name="orders", record_key="id", schema=schema, buckets=2)
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
try:
    # No lakewarden.spark.register(spark): Spark finds the format in pyspark_lakewarden.
    frame = spark.createDataFrame([("a", 1), ("b", 2)], "id string, amount long")
    frame.write.format("lakewarden").mode("append").save(root)
    update = spark.createDataFrame([("a", 5)], "id string, amount long")
    lakewarden.spark.write(update, root, "upsert")  # buckets through the Java UDFs
    back = spark.read.format("lakewarden").load(root).select("id", "amount")
    rows = sorted((row.id, row.amount) for row in back.collect())
finally:
    spark.stop()
print(json.dumps({"rows": rows, "local": lakewarden.read(root).num_rows}))
"""


def run_script(venv: Venv, script: str, work: Path, **env: str) -> dict[str, object]:
    """``script`` run by the venv's Python from ``work`` (outside the checkout, so the
    checkout is not on ``sys.path``); its last line of output, parsed as JSON."""
    path = work / "script.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run(
        [str(venv.python), str(path)],
        cwd=work,
        env=venv.env(**env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_wheel_without_extras_writes_and_reads_a_local_table(
    install: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = install("")
    result = run_script(venv, CORE_SCRIPT, tmp_path)

    assert result["rows"] == [{"id": "a", "amount": 3}, {"id": "b", "amount": 2}]
    assert str(result["module"]).startswith(str(venv.root))  # the installed package
    assert result["s3"] == (
        "S3 storage needs the Python package 'boto3', which is not installed. "
        "Help: pip install 'lakewarden[s3]'"
    )
    for module in ("confluent_kafka", "boto3", "pyspark", "faust", "plotly", "matplotlib"):
        probe = subprocess.run(
            [str(venv.python), "-c", f"import {module}"], capture_output=True, check=False
        )
        assert probe.returncode != 0, f"{module} is installed without its extra"

    shown = subprocess.run(
        [str(venv.bin("lakewarden")), "table", "show", str(result["root"])],
        cwd=tmp_path,
        env=venv.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "orders" in shown.stdout

    service = subprocess.run(
        [str(venv.bin("lakewarden-timeline-lock"))],
        cwd=tmp_path,
        env=venv.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert service.returncode == 1
    assert service.stderr.strip().splitlines() == [
        "Error: Running the lakewarden services needs the Python package 'confluent_kafka', "
        "which is not installed. Help: pip install 'lakewarden[services]'"
    ]


@pytest.mark.spark
def test_the_wheel_with_spark_writes_and_reads_through_spark(
    install: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = install("spark")
    # A cache of its own: the UDF jar is compiled from the Java sources inside the wheel.
    cache = tmp_path / "udf-cache"
    result = run_script(venv, SPARK_SCRIPT, tmp_path, LAKEWARDEN_UDF_CACHE=str(cache))

    assert result == {"rows": [["a", 5], ["b", 2]], "local": 2}
    assert list(cache.glob("lakewarden-udf-*.jar"))
