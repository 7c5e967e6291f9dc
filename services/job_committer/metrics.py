"""Prometheus metrics of job-committer (served on ``/metrics`` by the health endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# A job commit takes milliseconds (a few files on local disk) to minutes (100k uploads).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

COMMITS = Counter(
    "lakewarden_job_commits_total",
    "Job commit requests answered, by status (committed, failed) and whether the answer was "
    "the recorded result of a job that had finished before (duplicate requests)",
    ["status", "recorded"],
)
FAILURES = Counter(
    "lakewarden_job_commit_failures_total",
    "Job commits that failed, by the stage that failed and the error's type",
    ["stage", "error_type"],
)
DURATION = Histogram(
    "lakewarden_job_commit_duration_seconds",
    "From taking a request up to its answer being sent",
    buckets=_BUCKETS,
)
FILES = Counter("lakewarden_job_commit_files_total", "Files put in place by job commits")
RESUMED = Counter(
    "lakewarden_job_commits_resumed_total",
    "Job commits that finished an interrupted commit of the same job (after a crash)",
)
MANIFESTS = Counter(
    "lakewarden_task_manifests_total",
    "TaskManifest events seen, by the result of early validation (valid, mismatch, missing, "
    "invalid, audit_only when the event names no table URI)",
    ["status"],
)
TRANSITIONS = Counter(
    "lakewarden_job_committer_transitions_total",
    "TimelineTransition events published for entries the service appended",
    ["transition"],
)
LOADED = Counter(
    "lakewarden_job_commit_manifests_total",
    "Manifests job commits loaded, by source: event (the TaskManifest event's copy, checked "
    "against the saved manifest's listing) or storage (read: a pointer-only event, an attempt "
    "the instance did not see, or a copy that did not match)",
    ["source"],
)
