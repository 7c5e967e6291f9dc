"""``Table.write``'s job commit by job-committer: the ``JobCommits`` of ``KafkaCoordinator``.

With Kafka configured (and ``kafka.job_commits`` at its default, ``service``) a Python write
does what the Spark driver does: it checks that a job-committer runs (``CommitterPresence``:
none within ``kafka.job_committer_wait_s`` raises ``JobCommitterUnavailableError`` before
anything is sent), its task attempt announces its manifest (a ``TaskManifest`` event), the
writer sends a ``JobCommitRequest`` for exactly that attempt and waits up to
``kafka.job_commit_timeout_s``; job-committer runs the very same ``commit_instant`` (files
placed, ``completed`` appended after the conflict rules, or ``rolled_back`` and the job
aborted) and answers. One ``CommitClient`` per coordinator, opened on the first commit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from lakewarden.clients.commit import AttemptManifest, CommitClient
from lakewarden.clients.committer_presence import CommitterPresence
from lakewarden.commit.stages.task import TaskCommitResult
from lakewarden.errors import CommitStateUnknownError
from lakewarden.settings import Settings
from lakewarden.table.job_commit import CommitRequest
from lakewarden.table.stats import CommitStats


class ServiceJobCommits:
    """Job commits by job-committer (``lakewarden.table.coordinator.JobCommits``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        producer_id: str,
        timeout_s: float | None = None,
        presence: CommitterPresence | None = None,
    ) -> None:
        self.settings = settings
        self.producer_id = producer_id
        self.timeout_s = settings.kafka.job_commit_timeout_s if timeout_s is None else timeout_s
        self.presence = presence or CommitterPresence(
            settings, wait_s=settings.kafka.job_committer_wait_s
        )
        self._guard = threading.Lock()
        self._client: CommitClient | None = None

    def commit_job(
        self,
        *,
        table_uri: str,
        table_id: str,
        spec: CommitRequest,
        tasks: Sequence[TaskCommitResult],
    ) -> CommitStats:
        """See ``JobCommits.commit_job``.

        Raises: JobCommitterUnavailableError (no job-committer runs; nothing was sent),
        JobCommitFailedError, CommitStateUnknownError, CommitServiceUnavailableError.
        """
        self.presence.require(table=table_id, instant=spec.instant)
        # The writer's committer options: those the request carries, else this process's.
        committer = self.settings.committer if spec.committer is None else spec.committer
        request = replace(spec, table_uri=table_uri, table_id=table_id, committer=committer)
        manifests = [
            AttemptManifest(str(t.attempt), t.manifest_key, t.files, t.bytes, t.saved)
            for t in tasks
        ]
        with self._guard:
            if self._client is None:
                self._client = CommitClient(self.settings, producer_id=self.producer_id)
            client = self._client
        try:
            return client.commit(request, timeout_s=self.timeout_s, manifests=manifests).stats
        except CommitStateUnknownError:
            self.presence.forget()  # no answer: has the committer gone? ask again next time
            raise

    def close(self) -> None:
        self.presence.close()
        with self._guard:
            client, self._client = self._client, None
        if client is not None:
            client.close()


__all__ = ["ServiceJobCommits"]
