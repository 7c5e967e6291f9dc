"""How a committer runs: thread pool size, batch sizes, optional checks."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from lakewarden.settings import CommitterSettings


class CommitterOptions(BaseModel):
    """Options of one committer (not persisted)."""

    model_config = ConfigDict(frozen=True)

    # 32: on S3 a call is a round trip (tens of ms) of which this process spends a few ms of
    # CPU, so many threads taking small chunks keep more requests in flight than fewer
    # threads taking large ones (`python -m benchmarks commit` measures it).
    threads: int = Field(
        default=32, ge=1, le=256, description="store I/O threads of job commit, cleanup, abort"
    )
    local_threads: int = Field(
        default=4,
        ge=1,
        le=256,
        description="threads on the fast local path: a local call takes ~10 us and Python "
        "holds the GIL between calls, so more threads only contend",
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description="entries per unit of parallel work; None: 2500 on the fast local path "
        "(calls are cheap, fewer hand-offs win), 4 otherwise (calls have latency: small "
        "units keep every thread busy to the end instead of a few finishing long chunks)",
    )
    check_destinations: bool | None = Field(
        default=None,
        description="before the first placement, check that no destination exists yet; "
        "None: in upload mode only. On S3 it is what lets abort tell an object it completed "
        "from a foreign one; renames need no check (never replacing, they leave a colliding "
        "file at its source, which is how abort and resume tell it apart)",
    )
    validate_output: bool = Field(
        default=False,
        description="after placing the files, stat every destination: its size, and its etag "
        "where the store has one (Hadoop's option)",
    )
    cleanup: bool = Field(
        default=True,
        description="delete the job directory after commit; False keeps _temporary's "
        "manifests for diagnosis",
    )
    part_size: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="multipart part size in upload mode (S3 needs >= 5 MiB but the last)",
    )
    summary_report_directory: str | None = Field(
        default=None,
        description="also write each job's _SUCCESS summary (committed or failed) to "
        "<directory>/summary-<jobId>.json (a path or URI; Hadoop's summary.report.directory)",
    )
    diagnostics_manifest_directory: str | None = Field(
        default=None,
        description="copy the manifests a job commit loads to <directory>/<jobId>/ "
        "(Hadoop's diagnostics.manifest.directory)",
    )
    max_loaded_manifests: int = Field(
        default=8,
        ge=1,
        description="manifests parsed at once while loading: bounds the committer's memory",
    )

    def with_settings(self, settings: CommitterSettings | None) -> CommitterOptions:
        """These options with the values ``settings`` sets (its ``threads`` sets both pools:
        a user names one thread count, as Hadoop's ``io.threads`` is one)."""
        if settings is None or settings.is_default:
            return self
        update: dict[str, object] = {}
        if settings.threads is not None:
            update["threads"] = settings.threads
            update["local_threads"] = settings.threads
        if settings.validate_output is not None:
            update["validate_output"] = settings.validate_output
        if settings.cleanup is not None:
            update["cleanup"] = settings.cleanup
        if settings.summary_report_directory is not None:
            update["summary_report_directory"] = settings.summary_report_directory
        if settings.diagnostics_manifest_directory is not None:
            update["diagnostics_manifest_directory"] = settings.diagnostics_manifest_directory
        return self.model_copy(update=update)

    @classmethod
    def from_settings(cls, *layers: CommitterSettings | None) -> CommitterOptions:
        """The defaults with each of ``layers`` applied in order (a later one wins)."""
        options = cls()
        for layer in layers:
            options = options.with_settings(layer)
        return options

    def checks_destinations(self, *, upload_mode: bool) -> bool:
        return upload_mode if self.check_destinations is None else self.check_destinations

    def batch_for(self, fast_local: bool) -> int:
        if self.batch_size is not None:
            return self.batch_size
        return 2500 if fast_local else 4

    def threads_for(self, fast_local: bool) -> int:
        return self.local_threads if fast_local else self.threads
