"""``Table.write``'s job commit by job-committer: the ``JobCommits`` of ``KafkaCoordinator``.

With ``LAKEWARDEN_KAFKA__JOB_COMMITS=service`` a Python write does what the Spark driver does:
its task attempt announces its manifest (a ``TaskManifest`` event), the writer sends a
``JobCommitRequest`` for exactly that attempt and waits; job-committer runs the very same
``commit_instant`` (files placed, ``completed`` appended after the conflict rules, or
``rolled_back`` and the job aborted) and answers. One ``CommitClient`` per coordinator, opened
on the first commit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from lakewarden.clients.commit import AttemptManifest, CommitClient, CommitRequest
from lakewarden.commit.stages.task import TaskCommitResult
from lakewarden.settings import Settings
from lakewarden.table.job_commit import JobCommitSpec
from lakewarden.table.stats import CommitStats


class ServiceJobCommits:
    """Job commits by job-committer (``lakewarden.table.coordinator.JobCommits``)."""

    def __init__(self, settings: Settings, *, producer_id: str, timeout_s: float) -> None:
        self.settings = settings
        self.producer_id = producer_id
        self.timeout_s = timeout_s
        self._guard = threading.Lock()
        self._client: CommitClient | None = None

    def commit_job(
        self,
        *,
        table_uri: str,
        table_id: str,
        spec: JobCommitSpec,
        tasks: Sequence[TaskCommitResult],
    ) -> CommitStats:
        """See ``JobCommits.commit_job``.

        Raises: JobCommitFailedError, CommitStateUnknownError, CommitServiceUnavailableError.
        """
        request = CommitRequest(
            table_uri=table_uri,
            table_id=table_id,
            instant=spec.instant,
            job_id=spec.job_id,
            accepted=spec.accepted,
            stats=spec.stats,
            once=spec.once,
            description=spec.description,
        )
        manifests = [
            AttemptManifest(str(t.attempt), t.manifest_key, t.files, t.bytes) for t in tasks
        ]
        with self._guard:
            if self._client is None:
                self._client = CommitClient(self.settings, producer_id=self.producer_id)
            client = self._client
        return client.commit(request, timeout_s=self.timeout_s, manifests=manifests).stats

    def close(self) -> None:
        with self._guard:
            client, self._client = self._client, None
        if client is not None:
            client.close()


__all__ = ["ServiceJobCommits"]
