"""The Spark session of the Spark tests: one per test session, local mode, stopped at the end.

``local[2,4]``: two task threads, and up to 4 attempts per task (plain ``local[2]`` never
retries a task, and retries are what the injected-failure tests exercise). Speculation is on,
as production jobs have it: Spark never launches a speculative copy on the host that runs the
original, and local mode has one host, so the speculation test also drives two attempts of a
partition through the writer directly (``test_spark_attempts.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _runtime import SparkRuntime

from lakewarden.devstack.s3 import DEV_ACCESS_KEY, DEV_SECRET_KEY
from lakewarden.spark.ingest import default_jars_dir
from lakewarden.testing.faults import ENV_VAR

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


def _start_session(work: Path) -> Any:
    """A new session; when starting it fails or is interrupted (a timeout under load), the
    half-started JVM is discarded, so the next attempt starts from nothing instead of failing
    with "SparkConf does not exist in the JVM"."""
    try:
        return _build_session(work)
    except BaseException:
        _discard_jvm()
        raise


def _build_session(work: Path) -> Any:
    from pyspark.sql import SparkSession

    import lakewarden.spark

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
    return session


def _stop_session(session: Any) -> None:
    """Stop ``session`` and its JVM, even when the py4j connection to it is unusable."""
    with contextlib.suppress(Exception):
        session.stop()
    _discard_jvm()


def _discard_jvm() -> None:
    """Shut down and kill the JVM pyspark launched and forget it, so the next ``getOrCreate``
    launches a new one instead of reusing a dead or half-started gateway."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
        process = getattr(gateway, "proc", None)  # the JVM launch_gateway started
        if process is not None:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
            if process.stdin is not None:  # pyspark keeps the JVM's stdin open to signal exit
                process.stdin.close()
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def _session_works(session: Any) -> bool:
    return bool(session.range(3).count() == 3)


_RUNTIME: SparkRuntime[Any] | None = None


@pytest.fixture(scope="session")
def spark_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkRuntime[Any]]:
    global _RUNTIME
    # Python workers must run this interpreter (the venv with pyarrow and lakewarden).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The test S3 endpoint's credentials, from the environment as on a real deployment: the
    # write options never carry them, and local-mode Python workers inherit this process's
    # environment (on a cluster: the executors' environment or instance role).
    os.environ["LAKEWARDEN_S3__ACCESS_KEY_ID"] = DEV_ACCESS_KEY
    os.environ["LAKEWARDEN_S3__SECRET_ACCESS_KEY"] = DEV_SECRET_KEY
    work = tmp_path_factory.mktemp("spark")
    # The fault plan file (``lakewarden.testing.faults.fault_plan`` writes a test's plan
    # there): the Python workers Spark starts inherit the variable and read the file.
    os.environ[ENV_VAR] = str(work / "fault-plan.json")
    runtime: SparkRuntime[Any] = SparkRuntime(
        start=lambda: _start_session(work), stop=_stop_session, works=_session_works
    )
    _RUNTIME = runtime
    try:
        yield runtime
    finally:
        _RUNTIME = None
        runtime.close()


@pytest.fixture
def spark(spark_runtime: SparkRuntime[Any]) -> object:
    """The worker's Spark session; a new one if an earlier test left it unusable (_runtime.py)."""
    return spark_runtime.session()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if _RUNTIME is None or not report.failed or "spark" not in getattr(item, "fixturenames", ()):
        return
    _RUNTIME.test_failed(interrupted="Timeout" in str(report.longrepr))


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    return tmp_path / "table"
