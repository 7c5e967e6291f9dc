"""Payloads that timeline entries carry: workload profiles and write statistics.

These are the shared vocabulary of the writer (which produces them), the conflict rules and
the state machine (which judge them) and snapshots (which read files from them). Frozen
pydantic, persisted inside timeline entries.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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


class MicroBatch(BaseModel):
    """One micro-batch of one run of a streaming query (Structured Streaming's ids): the
    identity an exactly-once sink keys on (delta-rs's ``Txn{app_id, version}``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_id: str = Field(min_length=1)
    run_id: str = ""
    batch_id: int = Field(ge=0)
    checkpoint: str = ""


COMPLETED_PAYLOAD_VERSION: Final = 2
# The key the error table's sources had in the string map of version 1 (``upgrade_legacy``).
LEGACY_ERROR_SOURCES_KEY: Final = "lakewarden.errors.sources"


class CommitStats(BaseModel):
    """The payload of a ``completed`` entry: a write's statistics, and what the action that
    completed records, each concept a typed field of its own:

    - ``job_id``: the committer job whose files the instant holds (a Spark write);
    - ``batch``: the streaming micro-batch it commits (the ``once`` rule of
      ``lakewarden.table.job_commit``: no two completed instants carry one query's batch id);
    - ``error_sources``: an error-table instant's main instants (``<table id>@<instant>``),
      each committed to the error table exactly once;
    - ``input_records``, ``deleted_records``: the records the write took in and, for a
      delete, removed (a delete that empties a bucket leaves no write statistic to count);
    - ``attempt``: a compaction's or clustering's executor attempt (fenced by ``inflight``);
    - ``rollback_target``: the ingestion instant a rollback rolled back;
    - ``clean``: what a clean deleted.

    Version 2 (``COMPLETED_PAYLOAD_VERSION``). Version 1 (no ``version`` key) kept the job id,
    micro-batch, sources and counts as strings in an ``extra_metadata`` map; ``upgrade_legacy``
    reads such a payload as the same typed values, so old timelines and checkpoints load
    unchanged in meaning.
    """

    model_config = ConfigDict(frozen=True)

    version: Literal[2] = COMPLETED_PAYLOAD_VERSION
    operation: str
    write_stats: tuple[WriteStat, ...] = ()
    # File groups whose every slice this instant makes invisible (overwrite, delete-all).
    replaced_file_groups: tuple[FileGroupId, ...] = ()
    failed_records: int = Field(default=0, ge=0)
    job_id: str | None = Field(default=None, min_length=1)
    batch: MicroBatch | None = None
    error_sources: tuple[str, ...] = ()
    input_records: int | None = Field(default=None, ge=0)
    deleted_records: int | None = Field(default=None, ge=0)
    # Compaction and clustering: the executor attempt that completes the plan; it must be the
    # attempt the plan's latest ``inflight`` names (the state machine refuses a fenced one).
    attempt: int | None = Field(default=None, ge=1)
    rollback_target: str | None = None
    clean: CleanOutcome | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_version_1(cls, data: Any) -> Any:
        return upgrade_legacy(data)

    def rolled_back_target(self) -> str | None:
        """A rollback's target (``rollback_target``)."""
        return self.rollback_target

    def clean_outcome(self) -> CleanOutcome | None:
        """A clean's counts (``clean``; None for another action)."""
        return self.clean


# Version 1's string map: the Spark writer's, the error table's, the clean's and the
# rollback's keys. Any other key was never read and is dropped.
_LEGACY_JOB_ID: Final = "spark.job_id"
_LEGACY_QUERY_ID: Final = "spark.streaming.query_id"
_LEGACY_RUN_ID: Final = "spark.streaming.run_id"
_LEGACY_BATCH_ID: Final = "spark.streaming.batch_id"
_LEGACY_CHECKPOINT: Final = "spark.streaming.checkpoint"
_LEGACY_INPUT_RECORDS: Final = ("num_input_records", "lakewarden.errors.records")
_LEGACY_DELETED_RECORDS: Final = "num_deletes"
_LEGACY_CLEAN_COUNTS: Final = ("files_deleted", "bytes_deleted", "uploads_aborted")
_LEGACY_ROLLBACK_TARGET: Final = "target"


def upgrade_legacy(data: Any) -> Any:
    """A ``completed`` payload as version 2 reads it: a version-1 dict (no ``version``, an
    ``extra_metadata`` map) with the map's values moved into the typed fields; anything else
    as it is (a payload that has ``version`` is never changed, so a validator that trusts it,
    such as replay's msgspec mirror, reads the same values).

    A typed field already set wins over the map (version-1 payloads written after the clean
    counts, the rollback target and the attempt were typed carry those as fields). A value
    the map holds but no reader could act on (a count that is not a non-negative integer,
    sources that are not a JSON list of strings, a batch without a query id or batch id) is
    left out, and so is any key no version-1 reader looked up. A map that is not strings to
    strings is refused, as version 1 refused it."""
    if not isinstance(data, dict) or "version" in data or "extra_metadata" not in data:
        return data
    meta = data["extra_metadata"]
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise ValueError("extra_metadata (version 1) must map strings to strings")
    typed = {k: v for k, v in data.items() if k != "extra_metadata"}
    found: dict[str, Any] = {
        "job_id": meta.get(_LEGACY_JOB_ID) or None,
        "batch": _legacy_batch(meta),
        "error_sources": _legacy_sources(meta.get(LEGACY_ERROR_SOURCES_KEY)),
        "input_records": next(
            (n for k in _LEGACY_INPUT_RECORDS if (n := _count(meta.get(k))) is not None), None
        ),
        "deleted_records": _count(meta.get(_LEGACY_DELETED_RECORDS)),
        "rollback_target": meta.get(_LEGACY_ROLLBACK_TARGET),
        "clean": _legacy_clean(meta),
    }
    for key, value in found.items():
        if value is not None and value != () and typed.get(key) is None:
            typed[key] = value
    return typed


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _legacy_batch(meta: dict[str, str]) -> dict[str, Any] | None:
    query, batch = meta.get(_LEGACY_QUERY_ID), _count(meta.get(_LEGACY_BATCH_ID))
    if not query or batch is None:
        return None
    return {
        "query_id": query,
        "run_id": meta.get(_LEGACY_RUN_ID, ""),
        "batch_id": batch,
        "checkpoint": meta.get(_LEGACY_CHECKPOINT, ""),
    }


def _legacy_sources(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    try:
        sources = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        return ()
    return tuple(sources)


def _legacy_clean(meta: dict[str, str]) -> dict[str, Any] | None:
    counts = {key: _count(meta.get(key)) for key in _LEGACY_CLEAN_COUNTS}
    if any(n is None for n in counts.values()):
        return None
    return {
        **counts,
        "earliest_retained_instant": meta.get("earliest_retained_instant"),
        "policy": meta.get("policy"),
    }
