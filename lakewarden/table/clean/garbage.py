"""Garbage the timeline does not list: found by one listing of the table.

1. **Files of rolled-back and aborted instants.** A base file's name carries the instant that
   wrote it (``<fileId>_<writeToken>_<instant>.parquet``), and so does a log file's
   (``...log.<version>_<writeToken>_<instant>``, one file per instant and attempt); one whose
   instant is rolled back or aborted, and that no completed write names, is garbage at once
   (a rollback that crashed after its ``rolled_back`` entry, a writer without private
   staging, and Spark tasks writing log files leave them).
2. **Job directories** ``_temporary/manifest_<job>/`` of jobs whose instant is finished
   (completed, rolled back, aborted): every file in them, and the pending multipart uploads
   their upload records name (S3), except uploads to a key a completed write names (those
   were completed, not pending).
3. **Orphans** (Iceberg's remove-orphan-files): data files no instant names and job
   directories no instant names, untouched for ``orphan_min_age_s``. A file whose name carries
   a pending instant, or an instant newer than the newest ``requested`` this clean read, is
   never one: its writer is (or may be) still at work. Orphans are reported always and deleted
   only when asked.

4. **Temporary files** a crashed write left (``.lw-tmp-*``, which listings skip; found by
   ``Storage.list_temporary``), untouched for ``temp_min_age_s``: a live write finishes its
   temporary file long before that. On S3 there are none (a put is atomic).
5. **Strays under** ``.lakewarden/``: names no lakewarden component writes. What is legitimate
   there (``METADATA_LAYOUT``): ``table.json``; timeline entries ``timeline/<seq:020d>.json``
   (every one, even a malformed one: removing it would make a gap); checkpoints
   ``timeline/_checkpoints/<seq:020d>.json``; job summaries ``jobs/<jobId>/_SUCCESS``; claim
   marks ``claims/<instant>.json``; spooled bad records ``errors/<instant>[.attempt-<n>].jsonl``
   (``lakewarden.errortable.divert``: ``settle`` deletes them, a clean never does). Any other
   name in ``timeline/``, ``jobs/`` or ``claims/`` (a half-written copy, a tool's backup:
   apache/hudi#19649's leftover manifest broke every later archive) is garbage once untouched
   for ``orphan_min_age_s``; any other name elsewhere under ``.lakewarden/`` is only an orphan
   candidate (a newer component's file).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Set
from dataclasses import dataclass

from pydantic import ValidationError

from lakewarden.commit.layout import DELTA_LOG_DIR, METADATA_DIR, TEMPORARY_DIR
from lakewarden.commit.uploads import UploadRecord
from lakewarden.storage import NotFoundError, ObjectInfo, Storage
from lakewarden.table.clean.policy import DEFAULT_TEMP_MIN_AGE_S
from lakewarden.table.files import split_key, written_by
from lakewarden.table.instant import Transition
from lakewarden.table.plans import CleanFile
from lakewarden.table.timeline_state import InstantState, TimelineState

_JOB_DIR_PREFIX = TEMPORARY_DIR + "manifest_"
# Every name lakewarden writes under .lakewarden/ (step 5 of the module docstring).
METADATA_LAYOUT = re.compile(
    r"\.lakewarden/(?:table\.json"
    r"|timeline/\d{20}\.json"
    r"|timeline/_checkpoints/\d{20}\.json"
    r"|jobs/[^/]+/_SUCCESS"
    r"|claims/[^/]+\.json"
    r"|errors/\d{17}(?:\.attempt-\d+)?\.jsonl)"
)
_METADATA_DIRS = tuple(METADATA_DIR + d for d in ("timeline/", "jobs/", "claims/"))
_GIVEN_UP = frozenset({Transition.ROLLED_BACK, Transition.ABORTED})


@dataclass(frozen=True)
class StorageGarbage:
    """What the listing found: ``files`` are garbage, ``orphans`` only candidates."""

    files: tuple[CleanFile, ...]
    orphans: tuple[CleanFile, ...]


def referenced_paths(state: TimelineState) -> set[str]:
    """Every file a completed write names."""
    return {
        stat.path
        for inst in state.instants.values()
        if inst.commit is not None
        for stat in inst.commit.write_stats
    }


def find_storage_garbage(
    storage: Storage,
    state: TimelineState,
    *,
    orphan_min_age_s: float,
    now_ms: int,
    temp_min_age_s: float = DEFAULT_TEMP_MIN_AGE_S,
    skip: Set[str] = frozenset(),
) -> StorageGarbage:
    """List the table once and sort what no instant needs (see the module docstring).
    ``skip``: files already planned (by retention or an earlier clean)."""
    referenced = referenced_paths(state)
    jobs: dict[str, list[ObjectInfo]] = defaultdict(list)
    temp_age_ms = int(temp_min_age_s * 1000)
    files = [f for f in _temporary_files(storage, temp_age_ms, now_ms) if f.path not in skip]  # 4.
    orphans: list[CleanFile] = []
    min_age_ms = int(orphan_min_age_s * 1000)
    for info in storage.list(""):
        if info.key.startswith(DELTA_LOG_DIR):
            continue  # the published Delta log: never garbage (lakewarden.publish)
        if info.key.startswith(METADATA_DIR):
            old = now_ms - info.mtime_ms >= min_age_ms and info.key not in skip
            if old and not METADATA_LAYOUT.fullmatch(info.key):
                stray = _metadata_stray(info)  # 5.
                (files if info.key.startswith(_METADATA_DIRS) else orphans).append(stray)
            continue
        if info.key.startswith(_JOB_DIR_PREFIX):
            jobs[info.key[len(_JOB_DIR_PREFIX) :].split("/", 1)[0]].append(info)
            continue
        if info.key in referenced or info.key in skip:
            continue
        verdict = _data_file(state, info)
        if verdict is None:
            continue
        if verdict.startswith("written by"):
            files.append(CleanFile(path=info.key, reason=verdict, size_bytes=info.size))
        elif now_ms - info.mtime_ms >= min_age_ms:
            orphans.append(CleanFile(path=info.key, reason=verdict, size_bytes=info.size))
    by_job = {
        inst.job_plan.job_id: inst
        for inst in state.instants.values()
        if inst.job_plan is not None and inst.job_plan.job_id is not None
    }
    for job_id, infos in sorted(jobs.items()):
        inst = by_job.get(job_id) or _instant_prefix(state, job_id)
        if inst is None:
            if all(now_ms - i.mtime_ms >= min_age_ms for i in infos):
                reason = f"job {job_id}: no instant names it (orphan job directory)"
                orphans.extend(_job_files(infos, reason))
            continue
        if inst.is_pending:
            continue  # its writer may be at work; a dead one is rolled back first
        reason = f"job {job_id} of instant {inst.instant} ({inst.state}) is finished"
        files.extend(_job_files(infos, reason))
        files.extend(_job_uploads(storage, infos, inst, referenced))
    return StorageGarbage(tuple(files), tuple(orphans))


def _temporary_files(storage: Storage, min_age_ms: int, now_ms: int) -> list[CleanFile]:
    return [
        CleanFile(
            path=info.key,
            reason=f"temporary file of an interrupted write, untouched for "
            f"{(now_ms - info.mtime_ms) / 3_600_000:.1f} h",
            size_bytes=info.size,
        )
        for info in storage.list_temporary()
        if now_ms - info.mtime_ms >= min_age_ms
    ]


def _metadata_stray(info: ObjectInfo) -> CleanFile:
    return CleanFile(
        path=info.key,
        reason="a name lakewarden does not write under .lakewarden/ (stray)",
        size_bytes=info.size,
    )


def _instant_prefix(state: TimelineState, job_id: str) -> InstantState | None:
    """The instant a job id starts with (``Table.write`` names its jobs ``<instant>-<uuid>``
    and records no job plan)."""
    head, sep, _ = job_id.partition("-")
    return state.get(head) if sep and len(head) == 17 and head.isdigit() else None


def _data_file(state: TimelineState, info: ObjectInfo) -> str | None:
    """Why a data file no completed write names is garbage ("written by ...") or an orphan
    candidate; None when it must stay (a pending or unseen writer's)."""
    instant = written_by(split_key(info.key)[1])
    if instant is None:
        return "no instant names it (orphan file)"
    writer = state.get(instant)
    if writer is None:
        last = state.last_requested_time
        if last is None or instant > last:
            return None  # a writer whose requested entry this clean has not read yet
        return f"its instant {instant} is not on the timeline (orphan file)"
    if writer.is_pending:
        return None
    if writer.state in _GIVEN_UP:
        return f"written by instant {instant}, which is {writer.state}"
    return f"instant {instant} completed without it (orphan file of a rejected attempt)"


def _job_files(infos: Iterable[ObjectInfo], reason: str) -> list[CleanFile]:
    return [CleanFile(path=i.key, reason=reason, size_bytes=i.size) for i in infos]


def _job_uploads(
    storage: Storage, infos: Iterable[ObjectInfo], inst: InstantState, referenced: Set[str]
) -> list[CleanFile]:
    """The pending multipart uploads the job's upload records name (S3)."""
    if not storage.capabilities.multipart_uploads:
        return []
    uploads: list[CleanFile] = []
    reason = f"pending upload of finished job of instant {inst.instant} ({inst.state})"
    for info in infos:
        if "/uploads/" not in info.key or not info.key.endswith(".json"):
            continue
        try:
            record = UploadRecord.model_validate_json(storage.read(info.key))
        except (NotFoundError, ValidationError):
            continue
        if record.key in referenced:
            continue  # completed by the job commit: an object now, not an upload
        if record.upload_id is not None:
            uploads.append(CleanFile(path=record.key, reason=reason, upload_id=record.upload_id))
            continue
        directory = record.key.rpartition("/")[0]
        if not directory:
            continue  # no prefix to list at the table root (see lakewarden.commit.uploads)
        for pending in storage.list_multipart_uploads(directory + "/"):
            if pending.key == record.key:
                uploads.append(
                    CleanFile(path=pending.key, reason=reason, upload_id=pending.upload_id)
                )
    return uploads


__all__ = ["METADATA_LAYOUT", "StorageGarbage", "find_storage_garbage", "referenced_paths"]
