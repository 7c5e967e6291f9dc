"""Copies of a job's records for people: Hadoop's ``summary.report.directory`` and
``diagnostics.manifest.directory``.

- ``summary_report_directory``: every job's ``_SUCCESS`` summary, committed or failed, is also
  written to ``<directory>/summary-<jobId>.json`` (Hadoop's name), so one place lists every
  job of every table that names it;
- ``diagnostics_manifest_directory``: the manifests the job commit loaded are copied to
  ``<directory>/<jobId>/<manifest file name>`` as they are read (no extra read), so they
  survive the job's cleanup.

Each directory is opened the way the table's storage is (``Storage.open_location``): an
``s3://`` report directory of a table on S3 uses the table's endpoint and credentials.

Both are best effort, as in Hadoop: a copy that cannot be written is logged and counted
(``report.failures``) and never fails the commit it describes.
"""

from __future__ import annotations

import logging

from lakewarden.commit.statistics import CommitStatistics
from lakewarden.storage import Storage

log = logging.getLogger(__name__)


class ReportWriter:
    """Writes the copies into the directories the options name (None: that copy is off).
    Each is opened on first use, from the table's ``storage``."""

    def __init__(
        self,
        storage: Storage,
        summary_dir: str | None,
        manifest_dir: str | None,
        stats: CommitStatistics,
    ) -> None:
        self.storage = storage
        self.summary_dir = summary_dir
        self.manifest_dir = manifest_dir
        self.stats = stats
        self._stores: dict[str, Storage] = {}

    def summary(self, job_id: str, data: bytes) -> str | None:
        """Copy a ``_SUCCESS`` summary; the key written, or None (off or failed)."""
        if self.summary_dir is None:
            return None
        return self._put(self.summary_dir, f"summary-{job_id}.json", data)

    def manifest(self, job_id: str, manifest_key: str, data: bytes) -> str | None:
        """Copy one loaded manifest; the key written, or None (off or failed)."""
        if self.manifest_dir is None:
            return None
        return self._put(self.manifest_dir, f"{job_id}/{manifest_key.rsplit('/', 1)[-1]}", data)

    def _put(self, directory: str, key: str, data: bytes) -> str | None:
        try:
            store = self._stores.get(directory)
            if store is None:
                store = self._stores.setdefault(directory, self.storage.open_location(directory))
            store.write(key, data)
        except Exception as err:  # noqa: BLE001 - a report never fails what it reports
            self.stats.increment("report.failures")
            log.warning("could not write %s under %s: %r", key, directory, err)
            return None
        return key
