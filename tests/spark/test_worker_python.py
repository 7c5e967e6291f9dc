"""``register`` says which Python Spark's workers will run when nobody chose one."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from lakewarden.spark._python import (
    WorkerPythonError,
    _can_import,
    check_worker_python,
)


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Context:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.master = master
        self._conf = _Conf(conf)

    def getConf(self) -> _Conf:  # noqa: N802 - SparkContext's name
        return self._conf


class _Session:
    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None) -> None:
        self.sparkContext = _Context(master, conf or {})


@pytest.fixture
def path_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A PATH whose only python3 is a script exiting with ``status``."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)

    def make(status: int) -> str:
        python = tmp_path / f"bin{status}" / "python3"
        python.parent.mkdir()
        python.write_text(f"#!/bin/sh\nexit {status}\n")
        python.chmod(0o755)
        monkeypatch.setenv("PATH", str(python.parent))
        _can_import.cache_clear()
        return str(python)

    return make


def test_local_mode_with_a_python3_that_lacks_lakewarden_is_refused(path_with: Any) -> None:
    python = path_with(1)
    with pytest.raises(WorkerPythonError) as caught:
        check_worker_python(_Session())
    message = str(caught.value)
    assert f"python3 ({python})" in message
    assert f"Help: before creating the SparkSession, export PYSPARK_PYTHON={sys.executable}" in (
        message
    )


def test_a_chosen_or_capable_python_passes(path_with: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path_with(1)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    check_worker_python(_Session())
    monkeypatch.delenv("PYSPARK_PYTHON")
    path_with(0)  # a python3 elsewhere that imports lakewarden and pyarrow
    check_worker_python(_Session(master="local-cluster[2,1,1024]"))


def test_a_cluster_gets_a_warning_naming_what_executors_need(
    path_with: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path_with(1)
    with caplog.at_level(logging.WARNING, logger="lakewarden.spark"):
        check_worker_python(_Session(master="spark://10.0.0.1:7077"))
    assert "must have lakewarden and pyarrow installed" in caplog.text


def test_spark_pyspark_python_in_the_builder_alone_is_named_as_ignored(path_with: Any) -> None:
    """PySpark gives its workers PYSPARK_PYTHON; the setting alone (no spark-submit) is not it."""
    path_with(1)
    with pytest.raises(WorkerPythonError) as caught:
        check_worker_python(_Session(conf={"spark.pyspark.python": sys.executable}))
    assert f"spark.pyspark.python={sys.executable} is set in the session's configuration" in (
        str(caught.value)
    )
