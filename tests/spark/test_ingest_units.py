"""``lakewarden ingest`` pieces that need no Spark session: triggers, jars, messages."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import click
import pyspark
import pytest
from click.testing import CliRunner
from pyspark.errors import StreamingQueryException

from lakewarden.cli import cli
from lakewarden.cli.ingest import batch_line, parse_trigger, summary
from lakewarden.spark.ingest import (
    BatchReport,
    IngestError,
    IngestJob,
    IngestSpec,
    IngestTotals,
    KafkaJarsMissingError,
    kafka_jars,
)
from lakewarden.spark.ingest import spark_error_summary as summarise


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("500ms", 0.5), ("1m", 60.0), ("2.5s", 2.5), ("available-now", None)],
)
def test_trigger_durations(text: str, seconds: float | None) -> None:
    assert parse_trigger(text) == seconds


@pytest.mark.parametrize("text", ["5", "0s", "fast", "-1s", "5h"])
def test_bad_triggers_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter, match="is not a trigger"):
        parse_trigger(text)


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path) -> None:
    with pytest.raises(KafkaJarsMissingError, match="make spark-jars"):
        kafka_jars(tmp_path)
    (tmp_path / "spark-sql-kafka-0-10_2.13-4.0.1.jar").write_bytes(b"")
    (tmp_path / "kafka-clients-3.9.1.jar").write_bytes(b"")
    assert [p.name for p in kafka_jars(tmp_path)] == [
        "kafka-clients-3.9.1.jar",
        "spark-sql-kafka-0-10_2.13-4.0.1.jar",
    ]


def test_the_fetched_jars_have_no_second_copy_of_what_pyspark_ships(repo_root: Path) -> None:
    """No class of a fetched jar is also in a jar pyspark ships (two copies of a class on one
    classpath load whichever comes first). Compared by class, not by file name: the AWS SDK's
    ``annotations`` jar is not JetBrains' ``annotations`` that pyspark ships."""
    jars = kafka_jars(repo_root / "infra" / "spark" / "jars")
    assert any(p.name.startswith("kafka-clients-3.9.1") for p in jars), jars
    pyspark_jars = list((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    assert len(pyspark_jars) > 100  # the folder was found
    shipped = set().union(*(_classes(p) for p in pyspark_jars))
    twice = {p.name: sorted(_classes(p) & shipped)[:3] for p in jars if _classes(p) & shipped}
    assert twice == {}


# Every Spark module carries this placeholder class; it is empty, so two copies are harmless.
_SPARK_STUB = "org/apache/spark/unused/UnusedStubClass.class"


def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as archive:
        return {
            name
            for name in archive.namelist()
            if name.endswith(".class")
            and not name.startswith("META-INF/")  # multi-release copies of the same class
            and not name.endswith("module-info.class")
            and name != _SPARK_STUB
        }


def test_spark_errors_are_summarised_by_the_bad_record_line() -> None:
    text = (
        "StreamingQueryException: [STREAM_FAILED] Query terminated\n"
        "  at org.apache.spark...\n"
        "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] lakewarden ingest: "
        "bad record at topic t partition 1 offset 7: not a JSON object: x. Help: ... "
        "SQLSTATE: P0001\n"
    )
    assert summarise(text) == (
        "lakewarden ingest: bad record at topic t partition 1 offset 7: not a JSON object: x. "
        "Help: ..."
    )
    assert summarise("") == "unknown error"


def test_a_lakewarden_exception_is_summarised_not_the_quoted_plan() -> None:
    # A failed commit's text: the Python traceback, then the plan quoting the bad-record
    # template between attribute ids (once summarised as if a record were bad).
    text = (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
        "perform commit: Traceback (most recent call last):\n"
        '  File "/x/lakewarden/spark/_stream.py", line 146, in commit\n'
        "lakewarden.errors.CommitStateUnknownError: commit state unknown for instant 1: no "
        "answer from job-committer within 300 s.\n"
        "+- ~Project [CASE WHEN raise_error(concat(lakewarden ingest: bad record at topic , "
        "topic#9,  partition , cast(partition#10 as string), . Help: fix the producer)) END\n"
    )
    assert summarise(text) == (
        "lakewarden.errors.CommitStateUnknownError: commit state unknown for instant 1: no "
        "answer from job-committer within 300 s."
    )


def test_progress_lines_and_summary() -> None:
    report = BatchReport(3, 10, 8, 2, "20250314092653589", 1500, 1200)
    assert batch_line(report) == (
        "[bold]batch 3[/]  read 10  written [green]8[/]  bad [yellow]2[/]  "
        "instant 20250314092653589  1.5 s"
    )
    totals = IngestTotals()
    totals.add(report)
    assert summary(totals, Path("/cp/_bad_records")) == (
        "ingested 1 micro-batches: 10 records read, 8 rows written, 2 bad records -> "
        "/cp/_bad_records; last instant 20250314092653589"
    )


def test_a_missing_bootstrap_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    runner = CliRunner()
    avro = runner.invoke(cli, ["ingest", "--topic", "t", "--table", "x", "--format", "avro"])
    assert avro.exit_code == 2 and "--bootstrap" in avro.output  # avro is accepted
    alone = runner.invoke(cli, ["ingest", "--topic", "t", "--table", "x"])
    assert alone.exit_code == 2 and "--bootstrap" in alone.output


class _Progress:
    def __init__(self, batch: int, rows: int, executed: bool) -> None:
        self.batchId, self.numInputRows = batch, rows
        self.runId = "run-1"
        self.durationMs = {"triggerExecution": 900, **({"addBatch": 700} if executed else {})}
        self.timestamp = "2025-03-14T09:26:53.589Z"


class _Query:
    id = "q-1"
    isActive = True

    def __init__(self) -> None:
        self.recentProgress: list[_Progress] = []

    def exception(self) -> None:
        return None


def _job(tmp_path: Path, query: _Query) -> IngestJob:
    """An ``IngestJob`` of a new table around ``query`` (no session: ``poll`` and ``run`` only
    talk to the query)."""
    from _spark_helpers import make_table

    table = make_table(tmp_path / "t")
    spec = IngestSpec(topic="t", table=table.uri, bootstrap="-", checkpoint=tmp_path / "cp")
    return IngestJob(None, spec, query, table.storage, table.config)  # type: ignore[arg-type]


def test_poll_reports_executed_batches_once_and_skips_idle_progress(tmp_path: Path) -> None:
    query = _Query()
    job = _job(tmp_path, query)
    query.recentProgress = [_Progress(0, 5, True), _Progress(1, 0, False)]  # 1: idle trigger
    assert [(r.batch_id, r.input_rows, r.instant) for r in job.poll()] == [(0, 5, None)]
    assert job.poll() == []
    query.recentProgress.append(_Progress(1, 7, True))  # batch 1 runs when data arrives
    (report,) = job.poll()
    assert (report.batch_id, report.input_rows, report.duration_ms) == (1, 7, 900)
    assert report.started_ms == 1741944413589
    assert (job.totals.batches, job.totals.input_rows) == (2, 12)


class _JvmProgress:
    """A progress update as the JVM holds it: its JSON costs a Py4J round trip (counted)."""

    calls = 0

    def __init__(self, batch: int, rows: int, executed: bool, second: int) -> None:
        self.text = json.dumps(
            {
                "id": "9d6a2f0e-0000-4000-8000-000000000001",
                "runId": "9d6a2f0e-0000-4000-8000-000000000002",
                "name": "q",
                "timestamp": f"2025-03-14T09:26:{second:02d}.589Z",
                "batchId": batch,
                "batchDuration": 900,
                "durationMs": {"triggerExecution": 900, **({"addBatch": 700} if executed else {})},
                "numInputRows": rows,
                "stateOperators": [],
                "sources": [],
                "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
            }
        )

    def json(self) -> str:
        _JvmProgress.calls += 1
        return self.text


class _JvmQuery:
    """``StreamingQuery._jsq``: the JVM's list of recent updates (a copy per call)."""

    def __init__(self) -> None:
        self.updates: list[_JvmProgress] = []

    def recentProgress(self) -> list[_JvmProgress]:  # noqa: N802 - the JVM's name
        return list(self.updates)


class _ClassicQuery(_Query):
    def __init__(self) -> None:
        super().__init__()
        self._jsq = _JvmQuery()


def test_poll_reads_only_the_progress_updates_it_has_not_seen(tmp_path: Path) -> None:
    """A poll converts the updates since the last one (one JSON each), not every update Spark
    keeps: ``recentProgress`` would cost hundreds of Py4J round trips per update and poll."""
    query = _ClassicQuery()
    job = _job(tmp_path, query)
    updates = query._jsq.updates
    updates.extend(_JvmProgress(b, 5, True, b) for b in range(30))
    updates.append(_JvmProgress(30, 0, False, 40))  # an idle trigger: batch 30 is to come
    assert [r.batch_id for r in job.poll()] == list(range(30))
    _JvmProgress.calls = 0
    assert job.poll() == []
    assert _JvmProgress.calls == 1  # the newest update only: nothing new behind it
    updates.append(_JvmProgress(30, 7, True, 41))
    updates.append(_JvmProgress(31, 3, True, 42))
    _JvmProgress.calls = 0
    assert [(r.batch_id, r.input_rows) for r in job.poll()] == [(30, 7), (31, 3)]
    assert _JvmProgress.calls == 3  # two new, and the one it had seen
    assert job.totals.batches == 32


class _EndingQuery(_Query):
    """A query whose available-now run ends during the first wait (``failure``: with it)."""

    def __init__(self, failure: Exception | None = None) -> None:
        super().__init__()
        self.failure = failure
        self.waits: list[float] = []

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 - Spark's name
        self.waits.append(timeout)
        self.isActive = False
        if self.failure is not None:
            raise StreamingQueryException(message=str(self.failure))
        self.recentProgress.append(_Progress(0, 5, True))
        return True

    def exception(self) -> Exception | None:  # type: ignore[override]
        return self.failure if not self.isActive else None


def test_run_returns_when_the_query_ends_not_a_poll_interval_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` waits on the query's end itself: an available-now run returns when its last
    batch is done, without sleeping out the rest of ``poll_s``."""

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"run slept {seconds} s instead of waiting on the query")

    monkeypatch.setattr("lakewarden.spark.ingest.time.sleep", no_sleep)
    query = _EndingQuery()
    totals = _job(tmp_path, query).run(poll_s=30)
    assert query.waits == [30]
    assert (totals.batches, totals.input_rows) == (1, 5)


def test_run_raises_a_query_that_failed_while_waited_on_as_ingest_error(tmp_path: Path) -> None:
    bad = "lakewarden ingest: bad record at topic t partition 0 offset 7: not a JSON object"
    query = _EndingQuery(failure=RuntimeError(bad))
    with pytest.raises(IngestError, match="bad record at topic t partition 0 offset 7"):
        _job(tmp_path, query).run(poll_s=30)
    assert query.waits == [30]
