"""Every Kafka topic lakewarden uses, declared once, and idempotent creation.

Names are ``settings.kafka.topic_prefix`` + suffix (``lakewarden.timeline``). Every topic is
keyed by table id, so partitions bound how many instances of a service share the tables.
``timeline`` keeps history forever: it is the replay source.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from lakewarden.errors import ConfigurationError, RetryableError
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS
FOREVER: Final = -1


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: its name suffix, partition count and retention (``-1`` = forever)."""

    suffix: str
    partitions: int
    retention_ms: int
    cleanup_policy: Literal["delete", "compact"] = "delete"
    events: tuple[str, ...] = ()
    extra_config: tuple[tuple[str, str], ...] = ()

    def name(self, settings: Settings) -> str:
        """The full topic name under the configured prefix."""
        return settings.kafka.topic_prefix + self.suffix

    def config(self) -> dict[str, str]:
        """Topic-level configuration for CreateTopics."""
        return {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": self.cleanup_policy,
            **dict(self.extra_config),
        }


LOCK_REQUESTS: Final = TopicSpec("lock.requests", 6, DAY_MS, events=("LockRequest",))
# Replies are only useful while a client waits for them.
LOCK_REPLIES: Final = TopicSpec("lock.replies", 6, HOUR_MS, events=("LockReply",))
# heartbeat-monitor judges liveness by broker time: the broker stamps every beat on append.
HEARTBEATS: Final = TopicSpec(
    "heartbeats",
    6,
    DAY_MS,
    events=("Heartbeat",),
    extra_config=(("message.timestamp.type", "LogAppendTime"),),
)
HEARTBEAT_EXPIRED: Final = TopicSpec(
    "heartbeat.expired", 6, 7 * DAY_MS, events=("HeartbeatExpired",)
)
TIMELINE: Final = TopicSpec("timeline", 6, FOREVER, events=("TimelineTransition",))
TASK_MANIFESTS: Final = TopicSpec("task.manifests", 6, 7 * DAY_MS, events=("TaskManifest",))
JOB_REQUESTS: Final = TopicSpec("job.requests", 6, 7 * DAY_MS, events=("JobCommitRequest",))
JOB_RESULTS: Final = TopicSpec("job.results", 6, 7 * DAY_MS, events=("JobCommitResult",))
ERRORS: Final = TopicSpec("errors", 6, 7 * DAY_MS, events=("ErrorRecord",))
CANCEL_REQUESTS: Final = TopicSpec("cancel.requests", 6, 7 * DAY_MS, events=("CancelRequest",))
CANCEL_RESULTS: Final = TopicSpec("cancel.results", 6, 7 * DAY_MS, events=("CancelResult",))
# 12 partitions: up to 12 cleaners share the tables evenly (4 get 3 each).
CLEAN_REQUESTS: Final = TopicSpec("clean.requests", 12, 7 * DAY_MS, events=("CleanRequest",))
# Dead letters wait for a human: keep them long enough to be noticed and replayed.
DLQ: Final = TopicSpec("dlq", 1, 30 * DAY_MS, events=("DeadLetter",))

TOPICS: Final[tuple[TopicSpec, ...]] = (
    LOCK_REQUESTS,
    LOCK_REPLIES,
    HEARTBEATS,
    HEARTBEAT_EXPIRED,
    TIMELINE,
    TASK_MANIFESTS,
    JOB_REQUESTS,
    JOB_RESULTS,
    ERRORS,
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    CLEAN_REQUESTS,
    DLQ,
)

# heartbeat-monitor's liveness view: compacted (the latest record per instant), partitioned
# like heartbeats (an instant's record lives in the partition of its beats). The monitor
# creates it; readers are ``lakewarden.clients.liveness.Liveness`` views.
LIVENESS_CHANGELOG: Final = TopicSpec(
    "heartbeat-monitor-liveness-changelog",
    HEARTBEATS.partitions,
    FOREVER,
    cleanup_policy="compact",
    events=("LivenessRecord",),
)

_BY_EVENT: Final[dict[str, TopicSpec]] = {
    event: spec for spec in (*TOPICS, LIVENESS_CHANGELOG) for event in spec.events
}


def topic_for_event(event: str) -> TopicSpec:
    """The topic an event is published to by default.

    Raises:
        ConfigurationError: no topic carries ``event``.
    """
    spec = _BY_EVENT.get(event.rsplit(".", 1)[-1])
    if spec is None:
        raise ConfigurationError(f"No topic carries event {event!r}; see lakewarden.events.topics")
    return spec


def ensure_topics(
    settings: Settings,
    *,
    specs: Iterable[TopicSpec] = TOPICS,
    replication_factor: int = 1,
    timeout_s: float | None = None,
) -> list[str]:
    """Create the topics of ``specs`` that do not exist yet; return the names created.

    Idempotent and safe under races: a topic that exists (or that another process creates
    meanwhile) is left as it is, including its configuration.

    Raises:
        ConfigurationError: Kafka is not configured.
        KafkaAuthenticationError: the broker refused the credentials.
        RetryableError: the broker did not answer or refused a creation.
        MissingExtraError: confluent-kafka is not installed (the ``kafka`` extra).
    """
    # Imported here: the topic declarations above are pure and used without the kafka extra.
    try:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic
    except ImportError as err:
        raise missing_extra("kafka", "Kafka support", err) from err
    from lakewarden.events.kafka_errors import AuthWatch

    timeout = settings.kafka.request_timeout_s if timeout_s is None else timeout_s
    watch = AuthWatch(settings.kafka)
    config = settings.kafka.librdkafka_config(logger=log)
    config["error_cb"] = watch
    admin = AdminClient(config)
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as err:
        admin.poll(0)  # serve the error events: a refused login is one of them
        watch.raise_if_refused()
        raise RetryableError(f"Cannot list topics: {err}. Help: is the broker up?") from err
    missing = [
        NewTopic(
            spec.name(settings),
            num_partitions=spec.partitions,
            replication_factor=replication_factor,
            config=spec.config(),
        )
        for spec in specs
        if spec.name(settings) not in existing
    ]
    if not missing:
        return []
    futures = admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout)
    return [name for name, future in futures.items() if _created(name, future, timeout)]


def _created(name: str, future: Any, timeout: float) -> bool:
    """Wait for one creation; False if someone else created the topic first."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        future.result(timeout=timeout)
    except TimeoutError as err:
        raise RetryableError(f"Creating topic {name} timed out after {timeout} s") from err
    except KafkaException as err:
        error = err.args[0] if err.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise RetryableError(f"Cannot create topic {name}: {err}") from err
    log.info("created topic", extra={"kafka_topic": name})
    return True
