"""One campaign Spark writer: the Python writer's workload (``_writer.write_loop``), each write
a Spark job through ``lakewarden.spark.write`` in a ``local[1]`` session.

    python tests/campaign/_spark_writer.py SPEC_JSON

Same spec, keys and history as ``_writer.py``, so its acknowledged, failed and unknown writes
are checked by the same checkers. Spark is heavy on a small machine: the plan gives a Spark
writer to a share of runs only (``--spark``), and the session is small (one task thread, two
attempts per task, one shuffle partition, no UI). Its first write is a one-row insert, then
``ready``: the run starts its clock only then, so the writes happen under its faults (a
session and a first job take minutes on a loaded machine). The writes the plan names get a
Spark task fault (``_schedule.TaskFault``) through the fault plan (``lakewarden.faults``: a
plan file the session's Python workers read, ``LAKEWARDEN_FAULT_PLAN``). A kill of
this process (SIGKILL of its process group) kills the JVM too: the driver's heartbeat stops,
and the cleaner rolls its instant back.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from _writer import SCHEMA, History, write_loop

from lakewarden.testing.faults import ENV_VAR, Fault, fault_plan, first_attempt

# The fault of each task fault kind: task 0 is always there.
TASK_FAULTS = {
    "fail": first_attempt(0),
    "exit": first_attempt(0, action="exit"),
    "slow": Fault(
        point="spark.task.before_write", action="delay", where={"partition": 0}, seconds=3
    ),
}
_DDL = ", ".join(f"{field.name} {'long' if field.name == 'ts' else 'string'}" for field in SCHEMA)


def _session(work: Path) -> Any:
    from pyspark.sql import SparkSession

    import lakewarden.spark
    from lakewarden.spark.ingest import default_jars_dir

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ[ENV_VAR] = str(work / "fault-plan.json")  # read by the Python workers
    jars = sorted(default_jars_dir().glob("*.jar"))  # S3A, for tables on S3
    session = (
        SparkSession.builder.master("local[1,2]")  # a failed task attempt is retried once
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

    def write(operation: str, rows: list[dict[str, Any]], task_fault: str | None) -> str:
        frame = spark.createDataFrame([tuple(r[f.name] for f in SCHEMA) for r in rows], _DDL)
        faults = (TASK_FAULTS[task_fault],) if task_fault else ()
        with fault_plan(*faults):
            result = lakewarden.spark.write(frame, spec["uri"], operation, partitions=1)
        return str(result.instant)

    try:
        actor = f"spark-{spec['writer']}-{spec['incarnation']}"
        write_loop(
            spec,
            history,
            write,
            actor=actor,
            bad_row_share=0.3 if spec.get("bad_rows") else 0,
            warm_up=True,
        )
    finally:
        spark.stop()
    history.append({"phase": "stop"})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
