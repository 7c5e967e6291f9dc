"""The fault plan: named points, matched arguments, actions, and how a plan reaches a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from lakewarden import faults
from lakewarden.faults import ENV_VAR, Fault, FaultPlan, InjectedFaultError, SimulatedCrash
from lakewarden.testing import ManualClock, fault_plan, wait_until

AFTER_COMMIT = "spark.task.after_commit"


def test_without_a_plan_a_point_does_nothing() -> None:
    restore = faults.install(None)  # the production case: no plan to consult
    try:
        assert faults._source is None
        faults.point(AFTER_COMMIT, partition=0, attempt=0)
        assert not faults.planned("spark.")
    finally:
        restore()


def test_a_fault_fires_where_its_arguments_match() -> None:
    fault = Fault(point=AFTER_COMMIT, action="raise", where={"partition": 1, "attempt": 0})
    with fault_plan(fault):
        assert faults.planned("spark.task.") and not faults.planned("commit.")
        faults.point(AFTER_COMMIT, partition=1, attempt=1)  # another attempt
        faults.point(AFTER_COMMIT, partition=0, attempt=0)  # another partition
        faults.point("spark.task.before_write", partition=1, attempt=0)  # another point
        with pytest.raises(InjectedFaultError, match="partition"):
            faults.point(AFTER_COMMIT, partition=1, attempt=0)
    faults.point(AFTER_COMMIT, partition=1, attempt=0)  # the plan is gone with the block


def test_a_crash_is_no_exception() -> None:
    with (
        fault_plan(Fault(point="commit_instant.step", action="crash")),
        pytest.raises(SimulatedCrash),
    ):
        try:
            faults.point("commit_instant.step", step="complete_instant")
        except Exception:  # noqa: BLE001 - what a handler would do: it must not see it
            pytest.fail("a crash was handled")


def test_once_fires_only_for_whoever_creates_the_mark(tmp_path: Path) -> None:
    mark = tmp_path / "crashed"
    fault = Fault(point="commit.stage.end", action="raise", mark=str(mark), once=True)
    with fault_plan(fault):
        with pytest.raises(InjectedFaultError):
            faults.point("commit.stage.end", stage="job_stage_rename_files")
        assert mark.exists()
        faults.point("commit.stage.end", stage="job_stage_rename_files")  # past it now


def test_a_pause_holds_until_its_file_exists_and_marks_that_it_was_reached(
    tmp_path: Path,
) -> None:
    release, reached = tmp_path / "go", tmp_path / "reached"
    fault = Fault(
        point="spark.task.before_write", action="pause", until=str(release), mark=str(reached)
    )
    done = threading.Event()

    def task() -> None:
        faults.point("spark.task.before_write", partition=0, attempt=0)
        done.set()

    with fault_plan(fault):
        worker = threading.Thread(target=task)
        worker.start()
        wait_until(reached.exists, what="the task at the point")
        assert not done.is_set()  # held: it cannot pass before the release
        release.touch()
        worker.join(10)
    assert done.is_set()


def test_a_pause_never_released_fails_instead_of_hanging(tmp_path: Path) -> None:
    fault = Fault(
        point="spark.task.before_write", action="pause", until=str(tmp_path / "never"), seconds=0.05
    )
    with fault_plan(fault), pytest.raises(InjectedFaultError, match="not released"):
        faults.point("spark.task.before_write", partition=0, attempt=0)


def test_a_delay_sleeps_then_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(skip_sleeps=True)
    monkeypatch.setattr(faults.time, "sleep", clock.sleep)
    with fault_plan(Fault(point="spark.task.before_write", action="delay", seconds=3)):
        faults.point("spark.task.before_write", partition=0, attempt=0)
    assert clock.slept == [3]


def test_an_unknown_point_or_a_once_without_mark_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown fault point"):
        Fault(point="spark.task.after_comit", action="raise")
    with pytest.raises(ValidationError, match="mark"):
        Fault(point=AFTER_COMMIT, action="raise", once=True)


def test_a_plan_file_is_reread_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plan.json"
    monkeypatch.setenv(ENV_VAR, str(path))
    source = faults._from_env()
    assert isinstance(source, faults._File)
    assert source.plan() == FaultPlan()  # no file yet: the empty plan
    fault = Fault(point=AFTER_COMMIT, action="exit", where={"partition": 0})
    with fault_plan(fault):  # writes the file the environment names
        assert source.plan().faults == (fault,)
    assert source.plan() == FaultPlan()  # emptied after the block


def test_a_new_process_gets_a_plan_from_its_environment(tmp_path: Path) -> None:
    plan = FaultPlan(faults=(Fault(point="job_committer.publish_result", action="exit"),))
    code = "from lakewarden import faults; faults.point('job_committer.publish_result')"
    env = {**os.environ, **plan.env()}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False, timeout=60)
    assert done.returncode == faults.EXIT_STATUS
    assert json.loads(plan.env()[ENV_VAR])["faults"][0]["action"] == "exit"
