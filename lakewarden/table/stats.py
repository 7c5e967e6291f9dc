"""Payloads that timeline entries carry: workload profiles and write statistics.

These are the shared vocabulary of the writer (which produces them), the conflict rules and
the state machine (which judge them) and snapshots (which read files from them). Frozen
pydantic, persisted inside timeline entries.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FileGroupId(BaseModel):
    """A file group: all versions (slices) of one file id in one partition."""

    model_config = ConfigDict(frozen=True)

    partition_path: str = Field(description="'' for an unpartitioned table, else 'k=v/k2=v2'")
    file_id: str

    def __str__(self) -> str:
        return f"{self.partition_path}/{self.file_id}" if self.partition_path else self.file_id


class WorkloadProfile(BaseModel):
    """What an instant is going to touch, recorded with its ``inflight`` entry."""

    model_config = ConfigDict(frozen=True)

    operation: str = Field(description="insert | upsert | delete | bulk_insert | overwrite | ...")
    file_groups: tuple[FileGroupId, ...] = ()
    # Overwrite replaces every file group of the table (or of the named partitions).
    replaces_all: bool = False
    # Compaction and clustering: the executor attempt this ``inflight`` starts. A later
    # ``inflight`` of the same plan (a retry) fences every earlier attempt: from then on only
    # the attempt it names may complete the plan. None: an ingestion, or an older entry.
    attempt: int | None = Field(default=None, ge=1)


class WriteStat(BaseModel):
    """One file written by a completed instant: the new slice of one file group."""

    model_config = ConfigDict(frozen=True)

    file_group: FileGroupId
    path: str = Field(description="key of the new file, relative to the table root")
    base_instant: str = Field(description="instant whose base file this slice builds on")
    num_records: int = Field(ge=0, description="records in the new file")
    num_inserts: int = Field(default=0, ge=0)
    num_updates: int = Field(default=0, ge=0)
    num_deletes: int = Field(default=0, ge=0)
    size_bytes: int = Field(ge=0)
    # Merge-on-read log files: the committed attempt and how many blocks it wrote. Authoritative
    # for readers, which drop any other block (see lakewarden.logfile). ``size_bytes`` of a log
    # file's statistic counts the bytes of those blocks (others may share the file).
    log_attempt: str | None = None
    log_block_count: int | None = None
    log_instant: str | None = Field(
        default=None, description="the instant whose blocks these are (INSTANT_TIME)"
    )

    @property
    def is_log(self) -> bool:
        """Whether this statistic names a log file's blocks (written in place, not placed by
        the job commit)."""
        return self.log_block_count is not None


class CleanOutcome(BaseModel):
    """What a clean deleted, as its ``completed`` entry records it."""

    model_config = ConfigDict(frozen=True)

    files_deleted: int = Field(default=0, ge=0)
    bytes_deleted: int = Field(default=0, ge=0)
    uploads_aborted: int = Field(default=0, ge=0)
    earliest_retained_instant: str | None = None
    policy: str | None = None


# The keys older clean and rollback entries kept in ``extra_metadata`` (still read).
_LEGACY_CLEAN_COUNTS = ("files_deleted", "bytes_deleted", "uploads_aborted")
_LEGACY_ROLLBACK_TARGET = "target"


class CommitStats(BaseModel):
    """The payload of a ``completed`` entry: a write's statistics, and what the action that
    completed records as typed fields (``attempt`` of a compaction or clustering,
    ``rollback_target`` of a rollback, ``clean`` of a clean). Entries written before these
    fields kept the last two in ``extra_metadata``; ``rolled_back_target()`` and
    ``clean_outcome()`` read either."""

    model_config = ConfigDict(frozen=True)

    operation: str
    write_stats: tuple[WriteStat, ...] = ()
    # File groups whose every slice this instant makes invisible (overwrite, delete-all).
    replaced_file_groups: tuple[FileGroupId, ...] = ()
    failed_records: int = Field(default=0, ge=0)
    # Compaction and clustering: the executor attempt that completes the plan; it must be the
    # attempt the plan's latest ``inflight`` names (the state machine refuses a fenced one).
    attempt: int | None = Field(default=None, ge=1)
    # A rollback: the ingestion instant it rolled back.
    rollback_target: str | None = None
    # A clean: what it deleted.
    clean: CleanOutcome | None = None
    # Other producers' identities and counts (a streaming micro-batch, the error table's
    # sources, a Spark job id, delete counts), string-valued.
    extra_metadata: dict[str, str] = Field(default_factory=dict)

    def rolled_back_target(self) -> str | None:
        """A rollback's target, from the typed field or an older entry's metadata."""
        return self.rollback_target or self.extra_metadata.get(_LEGACY_ROLLBACK_TARGET)

    def clean_outcome(self) -> CleanOutcome | None:
        """A clean's counts, from the typed field or an older entry's metadata (None when
        neither has them)."""
        if self.clean is not None:
            return self.clean
        meta = self.extra_metadata
        if not all(key in meta for key in _LEGACY_CLEAN_COUNTS):
            return None
        try:
            counts = {key: int(meta[key]) for key in _LEGACY_CLEAN_COUNTS}
        except ValueError:
            return None
        return CleanOutcome(
            **counts,
            earliest_retained_instant=meta.get("earliest_retained_instant"),
            policy=meta.get("policy"),
        )
