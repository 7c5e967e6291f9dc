"""Job abort."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from lakewarden.commit.errors import JobAlreadyCommittedError, MalformedManifestError
from lakewarden.commit.layout import TaskAttemptId
from lakewarden.commit.manifest import FileEntry, parse_manifest
from lakewarden.commit.stages._base import Stage, log
from lakewarden.commit.stages.finish import CleanupArgs, CleanupStage, read_summary
from lakewarden.commit.stages.validate import CommitPlan
from lakewarden.commit.statistics import CommitStatistics
from lakewarden.commit.success import SuccessData, build_summary
from lakewarden.storage import NotFoundError


@dataclass(frozen=True)
class JobAbortArgs:
    # Also abort a job recorded as committed: only for the table's rollback of an instant
    # that was made uncommittable first (its files may have been visible).
    force: bool = False
    reason: str = ""


@dataclass(frozen=True)
class JobAbortResult:
    rolled_back: int  # files a partial (or forced: complete) commit had put in place
    aborted_uploads: int
    unresolved_uploads: int


class JobAbortStage(Stage[JobAbortArgs, JobAbortResult]):
    """Abort a job: afterwards it has no files in the table and no pending uploads.

    1. refuse a committed job unless forced;
    2. save the ``ABORTED`` summary first: from then on the job can never commit, whatever
       happens to the rest of this abort (a rerun finishes it);
    3. roll back the files a commit put in place: those of the recorded plan (only a
       validated plan may be trusted: it checked that no destination existed before), or of
       the committed summary when forced;
    4. abort every pending upload and delete the job directory (the cleanup stage, with no
       attempt exempt).

    Raises: JobAlreadyCommittedError.
    """

    name = "job_stage_abort"

    def _execute(self, args: JobAbortArgs) -> JobAbortResult:
        summary = read_summary(self.store, self.layout)
        if summary is not None and summary.state == "COMMITTED" and not args.force:  # 1.
            raise JobAlreadyCommittedError(
                f"job {self.layout.job_id} is committed; aborting it could remove visible "
                "files. Help: roll back its instant on the timeline first, then abort with "
                "force=True.",
                job_id=self.layout.job_id,
            )
        if summary is None or summary.state != "ABORTED":  # 2.
            self.store.write(self.layout.summary_key, self._aborted(args).to_bytes())
        rolled_back = self._roll_back(summary)  # 3.
        cleanup = CleanupStage(self.config).run(CleanupArgs())  # 4.
        return JobAbortResult(rolled_back, cleanup.aborted_uploads, cleanup.unresolved_uploads)

    def _aborted(self, args: JobAbortArgs) -> SuccessData:
        return build_summary(
            job_id=self.layout.job_id,
            state="ABORTED",
            stage=self.name,
            committed={},
            iostatistics=CommitStatistics().snapshot(),
            diagnostics={"reason": args.reason or "job aborted", "forced": str(args.force)},
        )

    def _roll_back(self, summary: SuccessData | None) -> int:
        if summary is not None and summary.state == "COMMITTED":
            entries = [
                FileEntry(key, key, size)
                for files in summary.committed_files.values()
                for key, size in files
            ]
            return self._delete_placed(entries, source_gone_check=False)
        try:
            plan = CommitPlan.model_validate_json(self.store.read(self.layout.plan_key))
        except NotFoundError:
            return 0  # never validated, so never renamed
        if not self.store.can_rename and not plan.destinations_checked:
            # An object at a destination may predate the job: nothing may be deleted. (A
            # rename never replaces, so a destination whose source is gone is ours.)
            return 0
        total = 0
        for attempt, sha256 in sorted(plan.manifests.items()):
            total += self._delete_placed(self._entries(attempt, sha256), source_gone_check=True)
        return total

    def _entries(self, attempt: str, sha256: str) -> list[FileEntry]:
        """The entries of a manifest the plan validated; none if it is gone or changed (its
        entries would then be unvalidated, and deleting by them unsafe)."""
        key = self.layout.manifest_key(TaskAttemptId.parse(attempt))
        try:
            data = self.store.read(key)
            if hashlib.sha256(data).hexdigest() != sha256:
                log.warning("job abort: manifest %s changed since validation; skipped", key)
                return []
            return parse_manifest(data, key=key)[1]
        except (NotFoundError, MalformedManifestError):
            return []

    def _delete_placed(self, entries: list[FileEntry], *, source_gone_check: bool) -> int:
        """Delete each destination that holds the entry's file (right size, and in rename
        mode its source gone); returns how many."""
        rename_mode = self.store.can_rename
        batch = self.config.batch
        chunks = [entries[i : i + batch] for i in range(0, len(entries), batch)]

        def delete(chunk: list[FileEntry], stop: threading.Event) -> int:
            deleted = 0
            sizes = self.store.sizes([e.dst for e in chunk], stop)
            for entry, size in zip(chunk, sizes, strict=False):
                if size != entry.size:
                    continue
                if source_gone_check and rename_mode and self.store.size(entry.src) is not None:
                    continue  # still at its source: the destination is not ours
                self.store.delete(entry.dst)
                deleted += 1
            return deleted

        return sum(self.parallel(chunks, delete))
