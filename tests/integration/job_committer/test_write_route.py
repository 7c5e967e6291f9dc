"""Where ``Table.write``'s job commit runs with Kafka configured, against the real broker and
timeline-lock: by job-committer by default; with none running, a named error within
``kafka.job_committer_wait_s`` and nothing lost; in the writing process with the opt-out
``kafka.job_commits = "embedded"``.

The tests run in file order: the last one starts this module's job-committer.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _job_committers import JobCommitters

from lakewarden.api.connection import connect
from lakewarden.clients import CommitServiceUnavailableError, JobCommitterUnavailableError
from lakewarden.clients.committer_presence import job_committer_group
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table import Table
from lakewarden.table.instant import Transition
from lakewarden_services._common.process import ServiceProcess
from lakewarden_services._common.settings import service_group

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("lock_service")]

SCHEMA = pa.schema([("id", pa.int64()), ("note", pa.string())])


def with_kafka(settings: Settings, **update: object) -> Settings:
    return settings.model_copy(update={"kafka": settings.kafka.model_copy(update=update)})


def rows(*ids: int, note: str = "a") -> pa.Table:
    return pa.table({"id": list(ids), "note": [note] * len(ids)}, SCHEMA)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    return str(tmp_path / "t")


def data_files(root: Path) -> list[Path]:
    """Every file outside the table's metadata directory (data, staging, job records)."""
    return [p for p in root.rglob("*") if p.is_file() and ".lakewarden" not in p.parts]


def test_the_group_asked_for_is_job_committers_group(jc_settings: Settings) -> None:
    assert job_committer_group(jc_settings) == service_group("job-committer", jc_settings)


def test_without_job_committer_a_write_fails_named_rolled_back_and_loses_nothing(
    jc_settings: Settings, uri: str
) -> None:
    settings = with_kafka(jc_settings, job_committer_wait_s=1.0)
    with connect(settings) as connection:
        table = Table.open(uri, coordinator=connection.coordinator, settings=settings)
        with pytest.raises(
            JobCommitterUnavailableError, match="job-committer is unavailable"
        ) as err:
            table.write(rows(1, 2))
        assert isinstance(err.value, CommitServiceUnavailableError)  # retryable
        assert "LAKEWARDEN_KAFKA__JOB_COMMITS=embedded" in str(err.value)
        [instant] = table.timeline()
        assert instant.instant == err.value.instant
        assert instant.state == Transition.ROLLED_BACK
        assert table.read().num_rows == 0
        # the rollback deleted what the attempt wrote (staged and placed data files alike)
        assert [p for p in data_files(Path(uri)) if p.suffix == ".parquet"] == []


def test_the_opt_out_commits_in_the_writing_process_without_job_committer(
    jc_settings: Settings, uri: str
) -> None:
    settings = with_kafka(jc_settings, job_commits="embedded", job_committer_wait_s=0.0)
    assert KafkaSettings(job_commits="writer").job_commits == "embedded"  # the former name
    with connect(settings) as connection:
        table = Table.open(uri, coordinator=connection.coordinator, settings=settings)
        result = table.write(rows(1, 2))
        [entry] = [
            e
            for e in table.timeline_log.entries()
            if e.transition == "completed" and e.instant == result.instant
        ]
        assert entry.actor == table.actor
        assert table.read().num_rows == 2


def test_by_default_job_committer_commits_once_it_runs(
    jc_settings: Settings, uri: str, job_committer: JobCommitters
) -> None:
    service: ServiceProcess = job_committer.ensure(jc_settings)
    with connect(jc_settings) as connection:
        table = Table.open(uri, coordinator=connection.coordinator, settings=jc_settings)
        results = [table.write(rows(1, 2, note=note)) for note in ("a", "b")]
        completed = {
            e.instant: e.actor for e in table.timeline_log.entries() if e.transition == "completed"
        }
        assert [completed[r.instant].split("@")[0] for r in results] == ["job-committer"] * 2
        assert table.read().column("note").to_pylist() == ["b", "b"]
    assert (
        'lakewarden_job_commits_total{recorded="false",status="committed"} 2.0'
        in (service.get("/metrics")[1])
    )
