"""The Spark session of the Spark tests: one per test session, local mode, stopped at the end.

``local[2,4]``: two task threads, and up to 4 attempts per task (plain ``local[2]`` never
retries a task, and retries are what the injected-failure tests exercise). Speculation is on,
as production jobs have it: Spark never launches a speculative copy on the host that runs the
original, and local mode has one host, so the speculation test also drives two attempts of a
partition through the writer directly (``test_spark_attempts.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakewarden.devstack.s3 import DEV_ACCESS_KEY, DEV_SECRET_KEY
from lakewarden.spark.ingest import default_jars_dir

pytestmark = pytest.mark.spark

# PySpark's driver leaves the sockets of collect() to the garbage collector
# (pyspark.serializers / java_gateway), which reports them as unraisable ResourceWarnings.
SPARK_SOCKET_NOISE = (
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.filterwarnings(SPARK_SOCKET_NOISE))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    import lakewarden.spark

    # Python workers must run this interpreter (the venv with pyarrow and lakewarden).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The test S3 endpoint's credentials, from the environment as on a real deployment: the
    # write options never carry them, and local-mode Python workers inherit this process's
    # environment (on a cluster: the executors' environment or instance role).
    os.environ["LAKEWARDEN_S3__ACCESS_KEY_ID"] = DEV_ACCESS_KEY
    os.environ["LAKEWARDEN_S3__SECRET_ACCESS_KEY"] = DEV_SECRET_KEY
    work = tmp_path_factory.mktemp("spark")
    # infra/spark/jars (`make spark-jars`): S3A, so lakewarden.spark.read hands Spark the
    # files of tables on S3 (and Spark's Kafka source).
    jars = sorted(default_jars_dir().glob("*.jar"))
    session = (
        SparkSession.builder.master("local[2,4]")
        .config("spark.jars", ",".join(str(jar.resolve()) for jar in jars))
        .appName("lakewarden-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.speculation", "true")
        .config("spark.speculation.multiplier", "1.5")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "local"))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    lakewarden.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    return tmp_path / "table"
