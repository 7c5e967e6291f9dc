"""The commit message a task attempt returns to the driver (pickled by Spark).

It names the attempt (for the job commit, which loads exactly the manifests of the accepted
attempts), the manifest the attempt saved, and the write statistics of its files under their
final keys, which become the instant's ``CommitStats`` once the job commit has placed them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import WriterCommitMessage

from lakewarden.errors import NonRetryableError
from lakewarden.table.stats import FileGroupId, WriteStat

if TYPE_CHECKING:
    # Only a type here: a task worker builds messages without a batch and must not import
    # the driver's transaction (the coordinator, the plan models: ~0.1 CPU s per worker).
    from lakewarden.errortable.records import ErrorRow
    from lakewarden.spark._transaction import BatchKey


class ForeignCommitMessageError(NonRetryableError):
    """A commit message of another instant or job reached this job's commit."""


@dataclass(frozen=True)
class TaskCommitMessage(WriterCommitMessage):
    """What one accepted task attempt wrote."""

    instant: str
    job_id: str
    attempt_id: str
    manifest_key: str
    write_stats: tuple[WriteStat, ...] = ()
    # File groups this attempt made invisible (merged sibling groups, emptied groups).
    replaced_file_groups: tuple[FileGroupId, ...] = ()
    num_input_records: int = 0
    num_deletes: int = 0
    # Rows left out of the write and published to the error table (RFC-20).
    num_failed_records: int = 0
    # A compaction task: the records it set aside for the error table, which the driver
    # spools for its executor attempt (``lakewarden.tableservice.unfit``).
    failed_rows: tuple[ErrorRow, ...] = ()
    # Streaming: the micro-batch the attempt belongs to.
    batch: BatchKey | None = None
    # The attempt published its TaskManifest event itself (``_announce``); if not, the
    # driver announces it with the commit request.
    manifest_published: bool = False


@dataclass(frozen=True)
class SkippedBatchMessage(WriterCommitMessage):
    """Streaming: the attempt found its micro-batch committed already and wrote nothing."""

    instant: str
    query_id: str
    batch_id: int


@dataclass(frozen=True)
class EmptyTaskMessage(WriterCommitMessage):
    """Streaming: the attempt had no rows (it opened no instant and wrote nothing). ``batch``
    names the micro-batch, so that a commit without rows can still open the query's session
    ahead of the first batch with rows."""

    batch: BatchKey | None = None


def accepted_messages(
    messages: Sequence[WriterCommitMessage | None], *, instant: str, job_id: str
) -> list[TaskCommitMessage]:
    """The messages of the accepted attempts of this job (Spark passes None for a task that
    produced no message).

    Raises: ForeignCommitMessageError."""
    accepted = [m for m in messages if isinstance(m, TaskCommitMessage)]
    for message in accepted:
        if message.instant != instant or message.job_id != job_id:
            raise ForeignCommitMessageError(
                f"commit of instant {instant} (job {job_id}) received the message of attempt "
                f"{message.attempt_id} of instant {message.instant} (job {message.job_id}). "
                "Help: this is a bug in the writer; nothing was committed.",
                instant=instant,
                attempt=message.attempt_id,
            )
    return accepted
