"""job-committer, declared: its settings, topics and group (it keeps no state of its own:
storage holds every state it needs, see the package docstring)."""

from __future__ import annotations

from typing import Final

from lakewarden.events.topics import DLQ, JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common import ServiceSettings
from lakewarden_services.job_committer.held import HeldManifestSettings

SERVICE: Final = "job-committer"
TOPICS: Final = (JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS, TIMELINE, DLQ)

settings = Settings()
service_settings = ServiceSettings()
held_settings = HeldManifestSettings()
