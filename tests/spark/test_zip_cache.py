"""PySpark workers keep the directories of unchanged zips across tasks (``_zip_cache``); a zip
that changed is re-read, so a module added to it is still found."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakewarden.spark import _zip_cache


@pytest.fixture
def pristine_zipimport() -> Iterator[None]:
    """The test installs the check into this process; take it out again afterwards."""
    importer: Any = zipimport.zipimporter
    before = importer.__dict__.get("invalidate_caches")
    marked = hasattr(importer, _zip_cache._MARK)
    if marked:
        pytest.skip("the check is installed in this process already")
    yield
    importer.invalidate_caches = before
    if hasattr(importer, _zip_cache._MARK):
        delattr(importer, _zip_cache._MARK)


def _zip(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in modules.items():
            archive.writestr(f"{name}.py", text)


def test_installs_only_in_a_pyspark_worker(
    pristine_zipimport: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHON_WORKER_FACTORY_SECRET", raising=False)
    assert not _zip_cache.install()
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "x")
    monkeypatch.setenv("LAKEWARDEN_SPARK_ZIP_CACHE", "0")
    assert not _zip_cache.install()
    monkeypatch.delenv("LAKEWARDEN_SPARK_ZIP_CACHE")
    assert _zip_cache.install()
    assert _zip_cache.install()  # idempotent


def test_unchanged_zip_is_not_reread_and_a_changed_one_is(
    pristine_zipimport: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "lw_zip_cache_test.zip"
    _zip(archive, {"lw_zip_cache_a": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    for name in ("lw_zip_cache_a", "lw_zip_cache_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert importlib.import_module("lw_zip_cache_a").VALUE == 1
    reads: list[str] = []
    read_directory = zipimport._read_directory  # type: ignore[attr-defined]

    def counted(path: str) -> Any:
        reads.append(path)
        return read_directory(path)

    monkeypatch.setattr(zipimport, "_read_directory", counted)
    assert _zip_cache.install(force=True)

    importlib.invalidate_caches()  # the first time, each importer reads once
    first = reads.count(str(archive))
    assert first >= 1
    importlib.invalidate_caches()  # PySpark's next task: nothing changed, nothing read
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == first

    _zip(archive, {"lw_zip_cache_a": "VALUE = 1\n", "lw_zip_cache_b": "VALUE = 2\n"})
    importlib.invalidate_caches()  # the zip was replaced: read again
    assert reads.count(str(archive)) > first
    assert importlib.import_module("lw_zip_cache_b").VALUE == 2
