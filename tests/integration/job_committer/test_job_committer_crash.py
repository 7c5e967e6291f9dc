"""kill -9 of job-committer mid-commit, then a restart: the redelivered request resumes and
the table ends the same as without the crash (no file lost, none twice, one completion).

The service kills itself with SIGKILL at the chosen point
(``lakewarden_services.job_committer.hooks``:
no cleanup, exactly as ``kill -9``); a marker file makes the restarted process go past it.
The client keeps waiting through the crash and gets its answer from the restarted service.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _jc_helpers import MODULE, Driver, as_set, data_files, make_table, rows, wait_for

from lakewarden.api.table import Table
from lakewarden.clients import CommitClient, CommitReply
from lakewarden.devstack import processes
from lakewarden.settings import Settings
from lakewarden.table.instant import Transition
from lakewarden_services._common.process import ServiceProcess
from lakewarden_services.job_committer.hooks import CRASH_AT, CRASH_ONCE

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("lock_service")]


@pytest.fixture
def crashing(
    jc_settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[ServiceProcess, Path]]:
    marker = tmp_path / "crashed"
    service = ServiceProcess(
        MODULE,
        jc_settings,
        home=tmp_path / "job-committer",
        extra_env={CRASH_AT: request.param, CRASH_ONCE: str(marker)},
    )
    service.start()
    try:
        yield service, marker
    finally:
        service.stop()


@pytest.mark.parametrize(
    "crashing",
    [
        # renames done, no _SUCCESS yet: the rerun recognises every rename
        "end:job_stage_rename_files",
        # _SUCCESS saved, the instant not completed: the rerun takes the recorded job result
        pytest.param("start:complete_instant", marks=pytest.mark.slow),
        # manifests loaded, nothing renamed yet
        pytest.param("end:job_stage_validate_manifests", marks=pytest.mark.slow),
        # completed, the answer not sent: the rerun answers from the timeline
        "start:publish_result",
    ],
    indirect=True,
)
def test_a_committer_killed_mid_commit_resumes_after_a_restart(
    crashing: tuple[ServiceProcess, Path], jc_settings: Settings, table_uri: str
) -> None:
    service, marker = crashing
    table = make_table(table_uri)
    driver = Driver.begin(table)
    accepted = [
        driver.task(task, rows(*((task * 100 + i, region, f"v{task}") for i in range(3))))
        for task, region in enumerate(["eu", "us", "apac", "latam"])
    ]
    request = driver.request(accepted)
    replies: list[CommitReply | BaseException] = []
    client = CommitClient(jc_settings)

    def ask() -> None:
        try:
            replies.append(client.commit(request, timeout_s=150))
        except BaseException as err:
            replies.append(err)

    waiter = threading.Thread(target=ask)
    waiter.start()
    try:
        pid = service.pid
        assert pid is not None
        assert wait_for(lambda: marker.exists() and not processes.pid_alive(pid), 60), (
            "the service did not crash at the hook:\n" + service.log_text()[-3000:]
        )
        service.start()  # a new process: the request is delivered again
        waiter.join(150)
    finally:
        waiter.join(5)
        client.close()

    [reply] = replies
    assert isinstance(reply, CommitReply), reply
    expected_paths = sorted(s.path for a in accepted for s in driver.stats[a])
    assert sorted(s.path for s in reply.stats.write_stats) == expected_paths
    reread = Table.open(table_uri)
    assert data_files(reread) == expected_paths  # no file lost, none twice
    assert as_set(reread.read()) == {
        (task * 100 + i, region, f"v{task}")
        for task, region in enumerate(["eu", "us", "apac", "latam"])
        for i in range(3)
    }
    states = reread.timeline()
    assert [(s.instant, s.state) for s in states] == [(driver.instant, Transition.COMPLETED)]
    assert not list(reread.storage.list("_temporary/"))
    summary = driver.committer.summary()
    assert summary is not None and summary.state == "COMMITTED"
    # the restarted process did resume (or, past the completion, answer from the record)
    _, metrics = service.get("/metrics")
    point = service.extra_env[CRASH_AT]
    if point == "start:publish_result":
        assert reply.recorded
        assert 'lakewarden_job_commits_total{recorded="true",status="committed"} 1.0' in metrics
    else:
        assert not reply.recorded
        assert "lakewarden_job_commits_resumed_total 1.0" in metrics
