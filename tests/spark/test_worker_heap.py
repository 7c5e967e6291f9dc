"""A PySpark worker freezes its heap at the start of the second call it serves
(``_worker_heap``), once, and only inside a PySpark worker unless turned off. ``gc.freeze`` is
replaced by a recorder: the test process's own heap stays as it is."""

from __future__ import annotations

import gc

import pytest

from lakewarden.spark import _worker_heap


@pytest.fixture
def freezes(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """A fresh call count, and the freezes ``settle`` asked for."""
    asked: list[None] = []
    monkeypatch.setattr(_worker_heap, "_calls", 0)
    monkeypatch.setattr(gc, "freeze", lambda: asked.append(None))
    monkeypatch.delenv("LAKEWARDEN_SPARK_HEAP_FREEZE", raising=False)
    return asked


def test_a_worker_freezes_on_its_second_call_only(
    freezes: list[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "from-spark")
    _worker_heap.settle()
    assert freezes == [], "the first call's imports and garbage are not frozen"
    _worker_heap.settle()
    assert len(freezes) == 1
    for _ in range(5):
        _worker_heap.settle()
    assert len(freezes) == 1, "frozen once per process"


def test_outside_a_worker_nothing_is_frozen(
    freezes: list[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHON_WORKER_FACTORY_SECRET", raising=False)
    for _ in range(3):
        _worker_heap.settle()
    assert freezes == []


def test_the_environment_turns_it_off(freezes: list[None], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "from-spark")
    monkeypatch.setenv("LAKEWARDEN_SPARK_HEAP_FREEZE", "0")
    for _ in range(3):
        _worker_heap.settle()
    assert freezes == []
    assert not _worker_heap.enabled()
