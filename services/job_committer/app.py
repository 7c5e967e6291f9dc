"""The faust app of job-committer: its topics, declared at module top (it keeps no table:
storage holds every state it needs, see the package docstring)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from lakewarden.events.topics import DLQ, JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common import (
    DeadLetters,
    Lifecycle,
    ServiceSettings,
    event_topic,
    make_app,
)

SERVICE = "job-committer"
TOPICS = (JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS, TIMELINE)

settings = Settings()
service_settings = ServiceSettings()
app = make_app(
    SERVICE,
    settings,
    partitions=JOB_REQUESTS.partitions,
    instance_id=service_settings.instance_id,
    commit_interval_s=service_settings.commit_interval_s,
)
lifecycle = Lifecycle(app, SERVICE)


requests_topic = event_topic(app, JOB_REQUESTS, settings)
manifests_topic = event_topic(app, TASK_MANIFESTS, settings)
results_topic = event_topic(app, JOB_RESULTS, settings)
timeline_topic = event_topic(app, TIMELINE, settings)
dlq_topic = event_topic(app, DLQ, settings)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)

# Job commits block (storage calls, the table lock): they run here, one at a time (the agent
# has concurrency 1); manifest checks get their own thread so they never wait behind a commit.
commit_pool = ThreadPoolExecutor(1, thread_name_prefix="job-commit")
manifest_pool = ThreadPoolExecutor(1, thread_name_prefix="manifest-check")
