"""commit_instant and the service's CommitWorker on local tables, without Kafka: success,
duplicates, every kind of failure with its stage, resumption after store faults, lost replies."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from _jc_unit import COORDINATOR, Job, as_set, connection, data_files, make_table, open_job, rows

from lakewarden.api.table import Table
from lakewarden.commit import ManifestCommitter
from lakewarden.errors import CommitStateUnknownError
from lakewarden.settings import CommitterSettings, Settings
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.conflicts import OverlappingCommitConflict
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import (
    AlreadyCommittedError,
    CommitRequest,
    InstantFinishedError,
    StatisticsMismatchError,
    commit_instant,
)
from lakewarden.table.stats import CommitStats, MicroBatch
from lakewarden.table.transaction import UnknownInstantError, WriteTransaction
from lakewarden.testing import Fault, SimulatedCrash, fault_plan
from lakewarden_services.job_committer.pools import THREAD_NAME_PREFIX
from lakewarden_services.job_committer.worker import ACTOR_PREFIX, CommitWorker


def spec(job: Job, **changes: object) -> CommitRequest:
    values: dict[str, object] = {
        "instant": job.instant,
        "job_id": job.job_id,
        "accepted": job.accepted,
        "stats": job.stats,
    }
    values.update(changes)
    return CommitRequest(**values)  # type: ignore[arg-type]


def request(job: Job, **changes: object) -> CommitRequest:
    values: dict[str, object] = {
        "table_id": job.table.table_id,
        "table_uri": job.table.uri,
        "instant": job.instant,
        "job_id": job.job_id,
        "job_attempt": 0,
        "accepted": job.accepted,
        "stats": job.stats,
    }
    values.update(changes)
    return CommitRequest(**values)  # type: ignore[arg-type]


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return make_table(str(tmp_path / "orders"))


@pytest.fixture
def worker() -> Iterator[CommitWorker]:
    worker = CommitWorker(Settings(), connection, retry_delay_s=0.01)
    yield worker
    worker.close()


def state_of(table: Table, instant: str) -> Transition:
    mine = Table.open(table.uri).state().get(instant)
    assert mine is not None
    return mine.state


# -- commit_instant ---------------------------------------------------------------------------


def test_commit_instant_places_the_files_and_completes(table: Table) -> None:
    job = open_job(table, rows((1, "eu", "a")), rows((2, "us", "b")))
    done = commit_instant(job.committer, job.txn, spec(job))
    assert not done.recorded and done.placed == 2 and done.stats == job.stats
    assert as_set(Table.open(table.uri).read()) == {(1, "eu", "a"), (2, "us", "b")}
    again = commit_instant(ManifestCommitter(table.storage, job.job_id), job.txn, spec(job))
    assert again.recorded and again.stats == job.stats and again.placed == 0


def test_statistics_naming_an_unplaced_file_roll_back_and_delete(table: Table) -> None:
    job = open_job(table, rows((1, "eu", "a")))
    stat = job.stats.write_stats[0]
    wrong = CommitStats(
        operation="insert",
        write_stats=(stat.model_copy(update={"size_bytes": stat.size_bytes + 1}),),
    )
    with pytest.raises(StatisticsMismatchError, match=stat.path):
        commit_instant(job.committer, job.txn, spec(job, stats=wrong))
    mine = Table.open(table.uri).state().get(job.instant)
    assert mine is not None and mine.state is Transition.ROLLED_BACK
    assert (mine.failed_stage, mine.failed_job_id) == ("check_statistics", job.job_id)
    assert mine.error_type == "StatisticsMismatchError"
    assert data_files(table) == []  # renamed by the job commit, deleted by the job abort
    summary = job.committer.summary()
    assert summary is not None and summary.state == "ABORTED"


def test_the_once_rule_refuses_a_second_completion(table: Table) -> None:
    first = open_job(table, rows((1, "eu", "a")))
    batch = MicroBatch(query_id="q", run_id="run-1", batch_id=7)
    meta = first.stats.model_copy(update={"batch": batch})
    commit_instant(first.committer, first.txn, spec(first, stats=meta))
    second = open_job(table, rows((2, "us", "b")))
    # Another run of the same query: the rule keys on the query id and the batch id.
    again = second.stats.model_copy(update={"batch": batch.model_copy(update={"run_id": "2"})})
    with pytest.raises(AlreadyCommittedError, match="micro-batch 7 of streaming query q") as info:
        commit_instant(second.committer, second.txn, spec(second, stats=again))
    assert info.value.committed_by == first.instant
    assert state_of(table, second.instant) is Transition.ROLLED_BACK
    assert as_set(Table.open(table.uri).read()) == {(1, "eu", "a")}


def test_a_store_fault_while_renaming_is_resumed_not_rolled_back(table: Table) -> None:
    job = open_job(table, rows((1, "eu", "a")), rows((2, "us", "b")))
    faulty = FaultyStorage(table.storage)
    faulty.fail("rename")  # the first rename: a disk hiccup (InjectedFaultError)
    committer = ManifestCommitter(faulty, job.job_id)
    done = commit_instant(committer, job.txn, spec(job))
    assert faulty.calls("rename") > 1 and done.resumed
    assert as_set(Table.open(table.uri).read()) == {(1, "eu", "a"), (2, "us", "b")}


@pytest.mark.parametrize("landed", [True, False])
def test_a_lost_completion_reply_is_settled_by_the_log(
    table: Table, landed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = open_job(table, rows((1, "eu", "a")))
    real = WriteTransaction.complete

    def lose_the_reply(self: WriteTransaction, *args: object, **kwargs: object) -> object:
        if landed:
            real(self, *args, **kwargs)  # type: ignore[arg-type]
        raise CommitStateUnknownError("reply lost", instant=self.instant)

    monkeypatch.setattr(WriteTransaction, "complete", lose_the_reply)
    if landed:
        done = commit_instant(job.committer, job.txn, spec(job))
        assert done.stats == job.stats
        assert state_of(table, job.instant) is Transition.COMPLETED
    else:
        with pytest.raises(CommitStateUnknownError):
            commit_instant(job.committer, job.txn, spec(job))
        assert state_of(table, job.instant) is Transition.INFLIGHT  # nothing rolled back
        assert len(data_files(table)) == 1  # nothing deleted: it may still complete


def test_a_rolled_back_instant_cannot_commit_and_its_job_is_aborted(table: Table) -> None:
    job = open_job(table, rows((1, "eu", "a")))
    job.txn.rollback("heartbeat expired")
    with pytest.raises(InstantFinishedError, match="rolled_back: heartbeat expired"):
        commit_instant(job.committer, job.txn, spec(job))
    summary = job.committer.summary()
    assert summary is not None and summary.state == "ABORTED"
    assert not list(table.storage.list("_temporary/"))


# -- the service's worker ---------------------------------------------------------------------


def test_the_worker_commits_and_reports_the_entry_it_appended(
    table: Table, worker: CommitWorker
) -> None:
    job = open_job(table, rows((1, "eu", "a")))
    outcome = worker.run(request(job))
    assert outcome.committed and not outcome.recorded and outcome.placed == 1
    [entry] = outcome.entries
    assert entry.transition is Transition.COMPLETED and entry.actor.startswith(ACTOR_PREFIX)
    again = worker.run(request(job))
    assert again.committed and again.recorded and again.stats == outcome.stats
    assert again.summary_key == f".lakewarden/jobs/{job.job_id}/_SUCCESS"


def test_the_worker_reports_a_conflict_with_its_stage_and_answers_it_again(
    table: Table, worker: CommitWorker
) -> None:
    job = open_job(table, rows((1, "eu", "late")))
    winner = table.write(rows((1, "eu", "first")))
    outcome = worker.run(request(job))
    assert not outcome.committed and not outcome.recorded
    assert outcome.error_type == "OverlappingCommitConflict"
    assert outcome.failed_stage == "complete_instant"
    assert outcome.reason is not None and winner.instant in outcome.reason
    [entry] = outcome.entries
    assert entry.transition is Transition.ROLLED_BACK
    again = worker.run(request(job))
    assert again.recorded and again.error_type == "OverlappingCommitConflict"
    assert again.failed_stage == "complete_instant"


@pytest.mark.parametrize(
    ("change", "stage", "error"),
    [
        ({"table_id": "not-this-table"}, "open_table", "RequestRefusedError"),
        ({"instant": "20000101000000000"}, "check_instant", "UnknownInstantError"),
    ],
)
def test_a_request_that_does_not_fit_its_table_changes_nothing(
    table: Table, worker: CommitWorker, change: dict[str, str], stage: str, error: str
) -> None:
    job = open_job(table, rows((1, "eu", "a")))
    outcome = worker.run(request(job, **change))
    assert (outcome.status, outcome.failed_stage, outcome.error_type) == ("failed", stage, error)
    assert outcome.entries == ()
    assert state_of(table, job.instant) is Transition.INFLIGHT
    assert UnknownInstantError.__name__ == "UnknownInstantError"


def test_a_request_naming_another_job_for_the_instant_is_refused(
    table: Table, worker: CommitWorker
) -> None:
    job = open_job(table, rows((1, "eu", "a")), plan_job="someone-else")
    outcome = worker.run(request(job))
    assert outcome.error_type == "RequestRefusedError" and outcome.failed_stage == "check_instant"
    assert "someone-else" in (outcome.reason or "")
    assert state_of(table, job.instant) is Transition.INFLIGHT  # not rolled back: not ours


def test_a_commit_crashed_at_a_planned_point_is_resumed_by_the_next_run(
    table: Table, worker: CommitWorker
) -> None:
    job = open_job(table, rows((1, "eu", "a"), (2, "us", "b")))
    renamed = Fault(
        point="commit.stage.end", action="crash", where={"stage": "job_stage_rename_files"}
    )
    with fault_plan(renamed), pytest.raises(SimulatedCrash):
        worker.run(request(job))
    assert state_of(table, job.instant) is Transition.INFLIGHT  # a crash rolls nothing back
    outcome = worker.run(request(job))  # the redelivered request, in the next process
    assert outcome.status == "committed" and outcome.resumed
    assert state_of(table, job.instant) is Transition.COMPLETED


def _pools_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread count of every ``ThreadPoolExecutor`` made in this process from now on."""
    made: list[int] = []
    real = ThreadPoolExecutor.__init__

    def init(self: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> None:
        made.append(args[0] if args else kwargs["max_workers"])
        real(self, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "__init__", init)
    return made


def _commit_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(THREAD_NAME_PREFIX)}


def _two_task_job(table: Table, n: int) -> Job:
    """Two task attempts: the job commit loads their manifests in parallel, on a pool."""
    return open_job(table, rows((n, "eu", "a")), rows((n + 1, "us", "b")))


def test_the_worker_runs_every_commit_on_one_pool_and_stops_it_on_close(table: Table) -> None:
    others = _commit_threads()  # other tests' workers, not closed
    mine = CommitWorker(Settings(), connection)
    assert mine.run(request(_two_task_job(table, 0))).committed  # the pool starts here
    with pytest.MonkeyPatch.context() as monkeypatch:
        made = _pools_made(monkeypatch)
        for n in range(2, 8, 2):
            assert mine.run(request(_two_task_job(table, n))).committed
    assert made == []  # no pool started (and no thread) per commit
    threads = _commit_threads() - others
    assert threads  # the job commits' work ran on the worker's pool
    mine.close()
    assert not any(t.is_alive() for t in threads)
    assert len(data_files(table)) == 8


def test_a_job_asking_for_another_thread_count_gets_a_pool_of_its_own(
    table: Table, worker: CommitWorker
) -> None:
    """The service's pool has its own settings' count (4 threads on a local table by
    default); a request for 2 is committed as before, on a pool started for the job."""
    two = CommitterSettings(threads=2)
    assert worker.run(request(_two_task_job(table, 0), committer=two)).committed
    with pytest.MonkeyPatch.context() as monkeypatch:
        made = _pools_made(monkeypatch)
        for n in range(2, 6, 2):
            assert worker.run(request(_two_task_job(table, n), committer=two)).committed
    assert made == [2, 2]


# -- Table.write runs the same protocol in-process --------------------------------------------


def test_table_write_commits_through_a_manifest_committer_job(table: Table) -> None:
    done = table.write(rows((1, "eu", "a"), (2, "us", "b")))
    [job_dir] = {o.key.split("/")[2] for o in table.storage.list(".lakewarden/jobs/")}
    assert job_dir.startswith(done.instant)  # the write's job, named after its instant
    summary = ManifestCommitter(table.storage, job_dir).summary()
    assert summary is not None and summary.state == "COMMITTED"
    placed = {key for files in summary.committed_files.values() for key, _ in files}
    assert placed == {s.path for s in done.stats.write_stats} == set(data_files(table))
    assert not list(table.storage.list("_temporary/"))  # attempt and job dirs cleaned up


def test_a_table_write_that_loses_a_conflict_aborts_its_job(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Table.open(table.uri, coordinator=COORDINATOR)
    real = WriteTransaction.complete

    def race(self: WriteTransaction, *args: object, **kwargs: object) -> object:
        monkeypatch.setattr(WriteTransaction, "complete", real)
        other.write(rows((1, "eu", "winner")))  # completes between our job commit and ours
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(WriteTransaction, "complete", race)
    with pytest.raises(OverlappingCommitConflict):
        table.write(rows((1, "eu", "loser")))
    states = [s.state for s in Table.open(table.uri).timeline()]
    assert states == [Transition.ROLLED_BACK, Transition.COMPLETED]
    assert as_set(Table.open(table.uri).read()) == {(1, "eu", "winner")}
    summaries = [
        ManifestCommitter(table.storage, key.split("/")[2]).summary()
        for key in {o.key for o in table.storage.list(".lakewarden/jobs/")}
    ]
    assert sorted(s.state for s in summaries if s is not None) == ["ABORTED", "COMMITTED"]
    assert len(data_files(table)) == 1  # the loser's renamed file was deleted
