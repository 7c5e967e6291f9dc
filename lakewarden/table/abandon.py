"""Giving an instant up: the one rollback path of every producer (``abandon``).

``Table.write``, the Spark driver (commit failure and Spark's ``abort``), the job-committer
(through ``commit_instant``), the error-table sink and, next, the table services call it; none
appends ``rolled_back`` or deletes files of its own. The order is the protocol: the
``rolled_back`` entry makes the instant uncommittable first, and only then are its files
garbage, so a completed instant (whose ``rolled_back`` is refused) never loses a file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from lakewarden.commit import ManifestCommitter
from lakewarden.table.instant import Transition
from lakewarden.table.transaction import WriteTransaction

log = logging.getLogger(__name__)

_MAX_REASON = 2000


@dataclass(frozen=True)
class Abandoned:
    """How ``abandon`` went: whether the instant is rolled back (its files are garbage) and the
    failures of its steps (also attached to the cause as notes when it is an error)."""

    rolled_back: bool
    failures: tuple[Exception, ...] = ()


def abandon(
    committer: ManifestCommitter | None,
    txn: WriteTransaction,
    cause: BaseException | str,
    *,
    stage: str,
    job_id: str | None = None,
    written: Sequence[str] = (),
) -> Abandoned:
    """Give an instant up; the one rollback path of every producer.

    1. append ``rolled_back``: the reason (the error, or ``cause`` when it is text), the failed
       ``stage``, the job and the error's type as fields. It makes the instant uncommittable
       and is refused if the instant completed: then nothing is deleted (Spark aborts after a
       commit that completed and then failed; a lost ``completed`` may have landed);
    2. abort the job: every file it placed or staged is deleted;
    3. delete ``written``: files put at their final keys without a committer (a store without
       private staging).

    A crash between the steps leaves invisible files of a rolled-back instant: the cleaner
    (or ``recorded_commit``) finishes the abort. Idempotent: after an earlier ``abandon`` the
    rollback is a no-op and the rest runs again."""
    failures: list[Exception] = []
    error = cause if isinstance(cause, BaseException) else None
    reason = f"{type(cause).__name__}: {cause}" if error is not None else str(cause)
    # A rollback entry needs a reason (an empty one is refused): say that none was given.
    reason = reason.strip() or f"no reason given (stage {stage})"
    job = job_id if job_id is not None else (committer.job_id if committer else None)
    try:
        txn.rollback(  # 1.
            reason[:_MAX_REASON],
            failed_stage=stage,
            job_id=job,
            error_type=type(error).__name__ if error is not None else None,
        )
    except Exception as rollback_err:
        if _completed(txn):
            log.warning("instant %s completed; not abandoning it (%s)", txn.instant, reason)
            _note(error, f"instant {txn.instant} completed: nothing was rolled back or deleted")
            return Abandoned(rolled_back=False)
        _note(error, f"rolling back instant {txn.instant} failed: {rollback_err!r}")
        _note(error, "its files were kept: the instant may have completed")
        return Abandoned(rolled_back=False, failures=(rollback_err,))
    if committer is not None:
        try:
            committer.abort_job(force=True, reason=reason)  # 2.
        except Exception as abort_err:
            failures.append(abort_err)
            _note(error, f"aborting job {committer.job_id} failed: {abort_err!r}")
    storage = txn.timeline.storage
    for key in written:  # 3.
        try:
            storage.delete(key)
        except Exception as delete_err:
            failures.append(delete_err)
            _note(error, f"deleting {key} of instant {txn.instant} failed: {delete_err!r}")
    return Abandoned(rolled_back=True, failures=tuple(failures))


def _completed(txn: WriteTransaction) -> bool:
    try:
        mine = txn.status()
    except Exception:  # storage trouble: say nothing completed (the files are kept anyway)
        return False
    return mine is not None and mine.state is Transition.COMPLETED


def _note(error: BaseException | None, note: str) -> None:
    if error is not None:
        error.add_note(note)
