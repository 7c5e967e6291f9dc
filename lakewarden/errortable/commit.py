"""The error table's idempotent commit (``commit_errors``).

``commit_errors`` appends one instant holding the errors of several main instants, through the
manifest committer like every other producer (``lakewarden.table.job_commit``):

1. drop the sources already committed (``CommitStats.error_sources`` of the completed
   instants of the error table);
2. resume the pending instant a crashed run left for exactly these sources once its task
   attempt was committed (its ``JobPlan`` names the job and the sources) and its heartbeat
   is no longer alive (never two executors of one instant); otherwise set up a
   committer job and append ``requested`` with a ``JobPlan`` naming both, then ``inflight``
   with the new file groups: append groups beside each bucket, as Spark appends, so no
   commit rewrites another's files;
3. write one Parquet file per file group into the job's task attempt, then commit the attempt
   (its manifest is saved);
4. ``commit_instant``: job commit (files placed, ``_SUCCESS`` summary saved), then
   ``completed`` with the sources (``error_sources``) after the rule, re-checked under the
   lock and after every rebase, that no other instant completed one of these sources
   meanwhile (``SourcesAlreadyCommittedError``); any failure rolls the instant back and
   aborts the job (``abandon``).

A crash after step 3 is resumed by the next call for the same sources: the job commit
recognises the renames already done, and the write statistics are read back from the files it
placed. A crash before leaves a pending instant whose files no snapshot names; the records are
read again from Kafka and committed by a later instant.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.commit import ManifestCommitter, TaskAttempt, TaskAttemptId, new_job_id
from lakewarden.commit.manifest import parse_manifest
from lakewarden.commit.stages import StageHook
from lakewarden.errortable.table import (
    OPERATION,
    SourceErrors,
    SourcesAlreadyCommittedError,
    committed_sources,
    rows_table,
)
from lakewarden.handle import TableHandle
from lakewarden.table.bucket import append_group, route
from lakewarden.table.coordinator import Liveness
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import (
    STAGE_WRITE_FILES,
    CommitRequest,
    abandon,
    commit_instant,
)
from lakewarden.table.parquet_options import write_parquet
from lakewarden.table.plans import JobPlan
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline_state import TimelineState
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.writer import stamped

# The task attempt's manifest keeps the instant's statistics (extra data) for a resumed commit.
STATS_KEY: Final = "lakewarden.errors.stats"
# An error-table commit is one process: one task attempt holds all its files.
_TASK: Final = 0

log = logging.getLogger(__name__)


def commit_errors(
    table: TableHandle,
    batches: Sequence[SourceErrors],
    *,
    hook: StageHook | None = None,
) -> str | None:
    """Commit the records of the ``batches`` not committed yet as one instant (steps in the
    module doc); the instant, or None when there was nothing new. ``hook`` is the committer's
    stage hook (tests crash between stages with it; ``commit_instant``'s steps are fault
    points, ``lakewarden.faults``).

    Raises: SourcesAlreadyCommittedError (nothing committed: reload and retry without them),
    LockTimeoutError, CommitStateUnknownError, StageFailedError, storage errors."""
    done = committed_sources(table.state())  # 1.
    batches = [b for b in batches if str(b.key) not in done and b.rows]
    if not batches:
        return None
    sources = tuple(sorted(str(b.key) for b in batches))
    work = _resumable(table, sources, hook) or _open(table, sources, hook)  # 2.
    txn, committer = work.txn, work.committer
    with txn.heartbeat():
        try:  # 3.
            stats = _write(table, work, batches, sources) if work.stats is None else work.stats
        except Exception as err:
            abandon(committer, txn, err, stage=STAGE_WRITE_FILES)
            raise
        spec = CommitRequest(
            txn.instant,
            committer.job_id,
            (str(work.attempt),),
            stats,
            description=f"error table {table.name}, instant {txn.instant}",
        )
        commit_instant(committer, txn, spec, validate=_not_committed_yet(table, sources))  # 4.
    return txn.instant


@dataclass(frozen=True)
class _Work:
    """The instant an error-table commit completes, its job and task attempt; ``stats`` when
    a resumed attempt was committed already."""

    txn: WriteTransaction
    committer: ManifestCommitter
    attempt: TaskAttemptId
    stats: CommitStats | None = None


def _open(table: TableHandle, sources: tuple[str, ...], hook: StageHook | None) -> _Work:
    committer = ManifestCommitter(table.storage, new_job_id(), stage_hook=hook)
    committer.setup_job()
    try:
        txn = WriteTransaction.begin(
            table.timeline_log,
            table.coordinator,
            table.table_id,
            operation=OPERATION,
            actor=table.actor,
            plan=JobPlan(job_id=committer.job_id, sources=sources),
        )
    except BaseException as err:
        try:
            committer.abort_job(reason=f"requested failed: {err!r}")
        except Exception as abort_err:
            err.add_note(f"aborting job {committer.job_id} failed: {abort_err!r}")
        raise
    return _Work(txn, committer, committer.layout.attempt_id(_TASK))


def _resumable(
    table: TableHandle, sources: tuple[str, ...], hook: StageHook | None
) -> _Work | None:
    """The inflight instant of exactly ``sources`` whose task attempt committed (its manifest
    is saved, or its job committed) and whose heartbeat is not alive: what a crashed run
    left to finish. One that cannot be read back is left to the cleaner (a new instant
    commits the records instead)."""
    for inst in reversed(table.state().pending()):
        plan = inst.job_plan
        if inst.state is not Transition.INFLIGHT or plan is None or plan.job_id is None:
            continue
        if plan.sources != sources:
            continue
        if table.coordinator.liveness(table.table_id, inst.instant) is Liveness.ALIVE:
            continue  # its executor is at work: at most one executor per instant
        committer = ManifestCommitter(table.storage, plan.job_id, stage_hook=hook)
        try:
            stats = _committed_stats(table, inst.instant, committer, sources)
        except Exception as err:  # noqa: BLE001 - not resumable; the records are not lost
            log.warning("cannot resume error-table instant %s: %r", inst.instant, err)
            continue
        if stats is None:
            continue
        txn = WriteTransaction.resume(
            table.timeline_log, table.coordinator, table.table_id, inst.instant, actor=table.actor
        )
        log.info("resuming error-table instant %s (job %s)", inst.instant, plan.job_id)
        return _Work(txn, committer, committer.layout.attempt_id(_TASK), stats)
    return None


def _committed_stats(
    table: TableHandle, instant: str, committer: ManifestCommitter, sources: tuple[str, ...]
) -> CommitStats | None:
    """The statistics of a job whose task attempt committed: from its manifest, or, once the
    job committed (its manifests are cleaned up then), from the files its summary names.
    None when the attempt never committed.

    Raises: StorageError, CommitError, KeyError (a manifest without the statistics)."""
    summary = committer.summary()
    if summary is not None and summary.state == "COMMITTED":
        files = [f for placed in summary.committed_files.values() for f in placed]
        return _stats_of(table, instant, sources, files)
    key = committer.layout.manifest_key(committer.layout.attempt_id(_TASK))
    if not table.storage.exists(key):
        return None
    header, _ = parse_manifest(table.storage.read(key), key=key)
    return CommitStats.model_validate_json(header.extra_data[STATS_KEY])


def _write(
    table: TableHandle, work: _Work, batches: Sequence[SourceErrors], sources: tuple[str, ...]
) -> CommitStats:
    """Steps 2 (``inflight``) and 3: the files into the task attempt, then its commit; the
    attempt's manifest keeps the statistics, so a resumed commit has them."""
    txn, data = work.txn, rows_table(batches)
    groups = {
        append_group(canonical, txn.instant, 0): part
        for canonical, part in route(data, table.config).items()
    }
    txn.inflight(WorkloadProfile(operation=OPERATION, file_groups=tuple(groups)))
    attempt = work.committer.task_attempt(_TASK)
    attempt.setup()
    stats = CommitStats(
        operation=OPERATION,
        write_stats=tuple(
            _write_file(table, attempt, txn.instant, n, group, part)
            for n, (group, part) in enumerate(groups.items())
        ),
        error_sources=sources,
        input_records=len(data),
    )
    attempt.commit(extra_data={STATS_KEY: stats.model_dump_json()})
    return stats


def _write_file(
    table: TableHandle,
    attempt: TaskAttempt,
    instant: str,
    n: int,
    group: FileGroupId,
    part: pa.Table,
) -> WriteStat:
    config = table.config
    name = BaseFileName(group.file_id, WriteToken(n, 0, 0), instant).render()
    key = file_key(group.partition_path, name)
    rows = stamped(part, instant, config, OPERATION)
    rows = config.stored_rows(rows, name)
    buffer = io.BytesIO()
    write_parquet(rows, buffer)
    attempt.write_file(key, buffer.getvalue())
    return WriteStat(
        file_group=group,
        path=key,
        base_instant=instant,
        num_records=len(rows),
        num_inserts=len(rows),
        size_bytes=buffer.tell(),
    )


def _stats_of(
    table: TableHandle, instant: str, sources: tuple[str, ...], files: Sequence[tuple[str, int]]
) -> CommitStats:
    """The statistics of a job committed before a crash: from the files it placed (the
    manifests are cleaned up by then)."""
    stats, records = [], 0
    for key, size in sorted(files):
        partition, _, name = key.rpartition("/")
        rows = pq.read_metadata(io.BytesIO(table.storage.read(key))).num_rows
        records += rows
        group = FileGroupId(partition_path=partition, file_id=BaseFileName.parse(name).file_id)
        stats.append(
            WriteStat(
                file_group=group,
                path=key,
                base_instant=instant,
                num_records=rows,
                num_inserts=rows,
                size_bytes=size,
            )
        )
    return CommitStats(
        operation=OPERATION,
        write_stats=tuple(stats),
        error_sources=sources,
        input_records=records,
    )


def _not_committed_yet(
    table: TableHandle, sources: Sequence[str]
) -> Callable[[TimelineState], None]:
    """The error table's exactly-once rule: no other completed instant holds these sources."""

    def rule(state: TimelineState) -> None:
        clash = committed_sources(state) & set(sources)
        if clash:
            raise SourcesAlreadyCommittedError(
                f"error table {table.name}: sources {sorted(clash)} were committed by "
                "another instant meanwhile; nothing of this instant is committed. "
                "Help: commit again without them.",
                sources=clash,
            )

    return rule
