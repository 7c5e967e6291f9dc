"""A task attempt announces its committed manifest itself: one ``TaskManifest`` event.

With Kafka configured, every task attempt that commits (accepted by the driver later or not:
a speculative loser, a retried attempt) publishes the event on ``lakewarden.task.manifests``
right after its task commit saved the manifest, with its attempt id, the manifest's path,
digest, file count and bytes, and the manifest itself when the event fits a Kafka message
(``lakewarden.events.manifests``). job-committer validates each one early and logs it (the
audit trail of every attempt, not only the accepted ones) and holds the manifests: the job
commit loads those of exactly the attempts the driver accepted from the events, reading
storage only for a manifest it did not receive.

The event is an announcement, not the commit: an attempt whose event could not be delivered
is not failed (its manifest is saved and the driver may accept it). Its commit message says
so (``manifest_published`` false) and the driver announces it instead, as it does for tasks
that cannot publish at all (JVM tasks).

An executor's Python worker runs many tasks (``spark.python.worker.reuse``), so the producer
is created once per worker process and settings, and kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import TYPE_CHECKING

from lakewarden.settings import Settings

if TYPE_CHECKING:
    from lakewarden.commit import SavedManifest

    # Imported when Kafka is configured only: without it a task worker need not load the
    # event layer (confluent-kafka, fastavro, the schemas).
    from lakewarden.events import EventProducer

log = logging.getLogger("lakewarden.spark")

# How long a task waits for the broker to acknowledge its announcement before it gives up on
# it (and lets the driver announce it): a task must not hang on an unreachable broker.
ANNOUNCE_TIMEOUT_S = 10.0

_guard = threading.Lock()
_producers: dict[str, EventProducer] = {}


def announce_manifest(
    settings: Settings,
    *,
    table_id: str,
    table_uri: str,
    instant: str,
    job_id: str,
    task_id: str,
    attempt_id: str,
    manifest_key: str,
    file_count: int,
    total_bytes: int,
    saved: SavedManifest | None = None,
) -> bool:
    """Publish the attempt's ``TaskManifest`` (with ``saved``, the manifest itself, when it
    fits) and wait for its acknowledgement. True when it was delivered; False when
    job-committer does not commit the job (no Kafka, or ``kafka.job_commits = "embedded"``)
    or the delivery failed (logged)."""
    if not settings.kafka.commits_by_service:
        return False
    from lakewarden.events.manifests import task_manifest_event

    try:
        producer = _producer(settings)
    except Exception as err:  # noqa: BLE001 - the broker did not answer: the driver announces
        log.warning("task manifest not announced (the driver announces it): %s", err)
        return False
    record = task_manifest_event(
        table_id=table_id,
        producer_id=f"spark-task:{attempt_id}",
        job_id=job_id,
        task_id=task_id,
        attempt_id=attempt_id,
        instant=instant,
        manifest_key=manifest_key,
        file_count=file_count,
        total_bytes=total_bytes,
        table_uri=table_uri,
        saved=saved,
    )
    try:
        producer.send("TaskManifest", record)
        producer.flush(ANNOUNCE_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - EventDeliveryError and more: the task goes on
        log.warning(
            "task manifest not announced (the driver announces it): %s",
            err,
            extra={"instant": instant, "attempt": attempt_id},
        )
        return False
    return True


def connect_announcer(settings: Settings) -> None:
    """Make this worker's producer and reach the topic now, rather than at its first
    announcement: a new producer's topic check, start and first delivery take about half a
    second, inside the write of a task's first batch. Never raises: the first announcement
    tries again (and the driver announces what a task could not)."""
    if not settings.kafka.commits_by_service:
        return
    from lakewarden.events.topics import TASK_MANIFESTS

    try:
        _producer(settings).connect(TASK_MANIFESTS, ANNOUNCE_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - a warm-up: the first announcement reports it
        log.warning("task manifest announcer not connected yet: %s", err)


def _producer(settings: Settings) -> EventProducer:
    """The worker's producer for ``settings``, created on first use after making sure the
    topic exists (without it every announcement would wait its whole timeout for nothing).

    Raises: RetryableError (the broker did not answer the topic check)."""
    from lakewarden.events import EventProducer, ensure_topics
    from lakewarden.events.topics import TASK_MANIFESTS

    # A digest: the librdkafka configuration may hold a password.
    described = json.dumps(
        [settings.kafka.librdkafka_config(), settings.kafka.topic_prefix], sort_keys=True
    )
    key = hashlib.sha256(described.encode()).hexdigest()
    with _guard:
        producer = _producers.get(key)
        if producer is None:
            ensure_topics(settings, specs=(TASK_MANIFESTS,), timeout_s=ANNOUNCE_TIMEOUT_S)
            producer = _producers[key] = EventProducer(
                settings, producer_id="spark-task", linger_ms=0
            )
        return producer
