"""One campaign Spark writer: the Python writer's workload (``_writer.write_loop``), each write
a Spark job through ``lakewarden.spark.write`` in a ``local[1]`` session.

    python tests/campaign/_spark_writer.py SPEC_JSON

Same spec, keys and history as ``_writer.py``, so its acknowledged, failed and unknown writes
are checked by the same checkers. Spark is heavy on a small machine: the plan gives a Spark
writer to a share of runs only (``--spark``), and the session is small (one task thread, one
shuffle partition, no UI). A kill of this process (SIGKILL of its process group) kills the
JVM too: the driver's heartbeat stops, and the cleaner rolls its instant back.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from _writer import SCHEMA, History, write_loop

_DDL = ", ".join(f"{field.name} {'long' if field.name == 'ts' else 'string'}" for field in SCHEMA)


def _session(work: Path) -> Any:
    from pyspark.sql import SparkSession

    import lakewarden.spark
    from lakewarden.spark.ingest import default_jars_dir

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    jars = sorted(default_jars_dir().glob("*.jar"))  # S3A, for tables on S3
    session = (
        SparkSession.builder.master("local[1]")
        .appName("lakewarden-campaign")
        .config("spark.jars", ",".join(str(jar.resolve()) for jar in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.local.dir", str(work))
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    lakewarden.spark.register(session)
    return session


def main(spec: dict[str, Any]) -> None:
    import lakewarden.spark

    history = History(Path(spec["history"]))
    work = Path(tempfile.mkdtemp(prefix="campaign-spark-", dir=Path(spec["history"]).parent.parent))
    spark = _session(work)

    def write(operation: str, rows: list[dict[str, Any]]) -> str:
        frame = spark.createDataFrame([tuple(r[f.name] for f in SCHEMA) for r in rows], _DDL)
        result = lakewarden.spark.write(frame, spec["uri"], operation, partitions=1)
        return str(result.instant)

    try:
        actor = f"spark-{spec['writer']}-{spec['incarnation']}"
        write_loop(
            spec, history, write, actor=actor, bad_row_share=0.3 if spec.get("bad_rows") else 0
        )
    finally:
        spark.stop()
    history.append({"phase": "stop"})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
