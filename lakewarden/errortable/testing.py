"""A harness for tests and benchmarks of the error table: a Spark-like write without Spark.

``FakeWrite`` opens an instant the way ``lakewarden.spark._job`` does (its plan names a
committer job), runs task attempts that write no data but fail records (``ErrorRecord``
events), and ends the instant: job commit of the accepted attempts then ``completed``, or
``rolled_back``. What the sink reads from storage is exactly what a real write leaves.

``settle_marker`` proves error-sink has settled everything published before it for a table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from lakewarden.commit import ManifestCommitter, new_job_id
from lakewarden.errortable.location import chosen_location
from lakewarden.errortable.records import (
    COMMIT_TIME,
    JOB_ID,
    RECORD_KEY,
    TABLE_ID,
    TABLE_NAME,
    TABLE_URI,
    TASK_ATTEMPT,
    error_record,
)
from lakewarden.events.topics import ERRORS
from lakewarden.handle import TableHandle
from lakewarden.storage import open_storage
from lakewarden.table.config import NotATableError, load_config
from lakewarden.table.instant import Action
from lakewarden.table.job_commit import STAGE_ABORT, CommitRequest, abandon, commit_instant
from lakewarden.table.plans import JobPlan
from lakewarden.table.reader import read_snapshot
from lakewarden.table.snapshot import build_snapshot
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline import Timeline
from lakewarden.table.transaction import WriteTransaction
from lakewarden.testing.wait import wait_until

if TYPE_CHECKING:
    from lakewarden.events import EventProducer


class FakeWrite:
    """One instant of ``table`` with a committer job; ``attempt(task, n)`` ids."""

    def __init__(self, table: TableHandle) -> None:
        self.table = table
        self.job_id = new_job_id()
        self.committer = ManifestCommitter(table.storage, self.job_id)
        self.committer.setup_job()
        self.txn = WriteTransaction.begin(
            table.timeline_log,
            table.coordinator,
            table.table_id,
            operation="insert",
            actor="fake-spark",
            action=Action.COMMIT,
            plan=JobPlan(job_id=self.job_id),
        )
        self.instant = self.txn.instant

    def attempt(self, task: int, attempt: int = 0) -> str:
        """Set up and commit a task attempt (no files); returns its id."""
        handle = self.committer.task_attempt(task, attempt)
        handle.setup()
        handle.commit()
        return str(handle.attempt_id)

    def errors(self, attempt_id: str, keys: list[str]) -> list[dict[str, Any]]:
        """``ErrorRecord`` events of ``attempt_id`` for records with ``keys``."""
        return [
            error_record(
                table_id=self.table.table_id,
                producer_id="fake-spark",
                record={"id": key, "amount": "not a number"},
                schema='{"id": "string", "amount": "int32"}',
                message=f"bad record {key}",
                context={
                    COMMIT_TIME: self.instant,
                    TABLE_NAME: self.table.name,
                    TABLE_ID: self.table.table_id,
                    TABLE_URI: self.table.uri,
                    RECORD_KEY: key,
                    TASK_ATTEMPT: attempt_id,
                    JOB_ID: self.job_id,
                    "partitionPath": "",
                    **chosen_location(self.table.uri, self.table.config, self.table.settings),
                },
            )
            for key in keys
        ]

    def complete(self, accepted: list[str], failed_records: int = 0) -> None:
        """Job commit of ``accepted``, then ``completed`` (``commit_instant``)."""
        stats = CommitStats(
            operation="insert",
            failed_records=failed_records,
            job_id=self.job_id,
        )
        with self.txn.heartbeat():
            self.txn.inflight(WorkloadProfile(operation="insert"))
            spec = CommitRequest(self.instant, self.job_id, tuple(accepted), stats)
            commit_instant(self.committer, self.txn, spec)

    def roll_back(self, reason: str = "test") -> None:
        """``rolled_back``, then job abort (``abandon``)."""
        abandon(self.committer, self.txn, reason, stage=STAGE_ABORT)


class SettleMarker(NamedTuple):
    """The marker write's instant on the main table and its one failed record's uid."""

    instant: str
    uid: str


def settle_marker(
    producer: EventProducer, table: TableHandle, errors_uri: str, timeout_s: float = 60.0
) -> SettleMarker:
    """Wait until error-sink has settled every error record of ``table`` published so far.

    A new write on ``table`` fails one record (same key, so same partition, at a later offset)
    and completes; that record reaches the error table at ``errors_uri`` only after the sink
    has consumed, and settled, every earlier one of the table. A duplicate the earlier records
    would cause is in the error table by then: this is the marker that replaces "sleep and hope
    a duplicate would have shown up".

    Returns the marker's instant and record uid, for the caller to leave out of what it checks.
    Raises: AssertionError (the marker was not committed within ``timeout_s``)."""
    marker = FakeWrite(table)
    attempt = marker.attempt(0)
    (event,) = marker.errors(attempt, ["settle-marker"])
    producer.send("ErrorRecord", event, topic=ERRORS)
    producer.flush(10)
    marker.complete([attempt])

    def committed() -> bool:
        try:
            uids = _read(errors_uri, "uid")
        except NotATableError:
            return False
        return event["uid"] in uids

    wait_until(committed, timeout_s=timeout_s, what="the marker record in the error table")
    return SettleMarker(marker.instant, str(event["uid"]))


def _read(uri: str, column: str) -> list[object]:
    """``column`` of the latest snapshot of the table at ``uri`` (no coordinator needed)."""
    storage = open_storage(uri)
    config = load_config(storage)
    state = Timeline(storage, table=config.name).load()
    snapshot = build_snapshot(state.completed())
    rows: list[object] = read_snapshot(storage, config, snapshot, columns=[column])[
        column
    ].to_pylist()
    return rows
