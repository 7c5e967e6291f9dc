"""Saving the ``_SUCCESS`` summary, and cleaning up the job directory."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

from lakewarden.commit._store import CommitStore
from lakewarden.commit.layout import JobLayout
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.success import SuccessData
from lakewarden.commit.uploads import UploadRecord, abort_recorded
from lakewarden.storage import NotFoundError


def read_summary(store: CommitStore, layout: JobLayout) -> SuccessData | None:
    """The job's ``_SUCCESS`` summary, None when there is none yet."""
    try:
        data = store.read(layout.summary_key)
    except NotFoundError:
        return None
    return SuccessData.from_bytes(data, key=layout.summary_key)


class SaveSuccessStage(Stage[SuccessData, str]):
    """Save the job's summary at ``.lakewarden/jobs/<jobId>/_SUCCESS`` (replacing an earlier
    failure summary of the same job); returns its key. See ``lakewarden.commit.success``."""

    name = "job_stage_save_success_marker"

    def _execute(self, args: SuccessData) -> str:
        self.store.write(self.layout.summary_key, args.to_bytes())
        return self.layout.summary_key


@dataclass(frozen=True)
class CleanupArgs:
    # Attempts whose uploads were completed (their records need no abort); all others' pending
    # uploads are aborted. Empty for a job abort: every pending upload goes.
    committed_attempts: frozenset[str] = frozenset()
    # Cleanup off (``CommitterOptions.cleanup``): step 1 only; the directory stays for
    # diagnosis (a pending upload is billed and invisible, so it is aborted all the same).
    keep_directory: bool = False


@dataclass(frozen=True)
class CleanupResult:
    attempt_dirs: int
    aborted_uploads: int
    unresolved_uploads: int


class CleanupStage(Stage[CleanupArgs, CleanupResult]):
    """Delete the job's work area (Hadoop's ``CleanupJobStage``).

    1. upload mode: abort the pending uploads recorded by every attempt that was not
       committed (losers, crashed attempts, zombies that recorded before this point);
    2. delete the task attempt directories in parallel (object stores delete per object, so
       one big recursive delete would be slow and all-or-nothing);
    3. delete what remains of the job directory (manifests, job and plan records, other job
       attempts).

    With ``keep_directory`` only step 1 runs. Idempotent: each step tolerates what an
    interrupted run already removed.
    """

    name = "job_stage_cleanup"

    def _execute(self, args: CleanupArgs) -> CleanupResult:
        tasks_dir = self.layout.tasks_dir
        aborted = unresolved = 0
        if not self.store.can_rename:  # 1.
            aborted, unresolved = self._abort_uploads(args.committed_attempts)
        if args.keep_directory:
            return CleanupResult(0, aborted, unresolved)
        attempts = self.store.child_dirs(tasks_dir)

        def delete(name: str, stop: threading.Event) -> None:
            if not stop.is_set():
                self.store.delete_tree(f"{tasks_dir}{name}/")

        self.parallel(attempts, delete)  # 2.
        self._delete_rest()  # 3.
        return CleanupResult(len(attempts), aborted, unresolved)

    def _abort_uploads(self, committed: frozenset[str]) -> tuple[int, int]:
        by_attempt: dict[str, list[str]] = defaultdict(list)
        for info in self.store.list(self.layout.tasks_dir):
            attempt = info.key[len(self.layout.tasks_dir) :].split("/", 1)[0]
            if attempt not in committed and "/uploads/" in info.key:
                by_attempt[attempt].append(info.key)

        def abort(keys: list[str], stop: threading.Event) -> tuple[int, int]:
            records = []
            for key in keys:
                if stop.is_set():
                    break
                try:
                    records.append(UploadRecord.model_validate_json(self.store.read(key)))
                except NotFoundError:
                    continue
            return abort_recorded(self.store, records)

        counts = self.parallel(list(by_attempt.values()), abort)
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def _delete_rest(self) -> None:
        # Deleted in parallel even on a local disk: unlinking a file that was fsynced (every
        # manifest is) waits for the journal, and concurrent unlinks share the wait.
        keys = [info.key for info in self.store.list(self.layout.job_dir)]
        batches = [keys[i : i + 8] for i in range(0, len(keys), 8)]

        def delete(batch: list[str], stop: threading.Event) -> None:
            for key in batch:
                if not stop.is_set():
                    self.store.delete(key)

        self.parallel(batches, delete)
        self.store.delete_tree(self.layout.job_dir)
