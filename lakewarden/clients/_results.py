"""What the request/reply clients of job-committer and cancel-manager share:
a private consumer of the service's results topic, assigned at the topic's end.

A client sends its request only once it listens: a reply can then never slip past it. It
reads every partition from the end it saw before sending, and skips the replies of others.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from lakewarden.events import EventConsumer, EventConsumerError
from lakewarden.events.topics import TopicSpec
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka import TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err


def listen_from_end(
    current: EventConsumer | None,
    settings: Settings,
    results: TopicSpec,
    *,
    client: str,
    service: str,
    unavailable: Callable[[str], Exception],
    log: logging.Logger,
    **config: Any,
) -> EventConsumer:
    """``current`` if it is already assigned, else a consumer (``current`` or a new one, in a
    group of its own named after ``client``) assigned every partition of ``results`` at its
    end. Later requests read on from where the last one stopped, which is past nothing they
    need. ``config`` adds librdkafka settings to a new consumer's.

    Raises:
        Exception: ``unavailable(message)`` when the topic is missing or cannot be read
            (nothing was sent yet, so the caller may tell the user so).
    """
    if current is not None and current.assignment():
        return current
    # Replies are not dead-lettered: an undecodable one is not for this client to judge.
    consumer = current or EventConsumer(
        settings,
        group_id=f"{client}-{uuid.uuid4().hex}",
        auto_commit=False,
        dead_letters=False,
        auto_offset_reset="latest",
        enable_partition_eof=False,
        logger=log,
        **config,
    )
    try:
        _assign_at_end(consumer, settings, results, service=service, unavailable=unavailable)
    except BaseException:
        if current is None:
            consumer.close()  # made here and of no use: the next request makes another
        raise
    return consumer


def _assign_at_end(
    consumer: EventConsumer,
    settings: Settings,
    results: TopicSpec,
    *,
    service: str,
    unavailable: Callable[[str], Exception],
) -> None:
    topic = results.name(settings)
    timeout = settings.kafka.request_timeout_s
    try:
        partitions = consumer.partitions(topic, timeout_s=timeout)
        if not partitions:
            raise unavailable(
                f"topic {topic} does not exist; nothing was sent. Help: start the "
                f"{service} service (`lakewarden dev up` runs it)."
            )
        ends = [
            TopicPartition(topic, p, consumer.watermarks(topic, p, timeout_s=timeout)[1])
            for p in partitions
        ]
    except EventConsumerError as err:
        raise unavailable(
            f"cannot read {topic}: {err}; nothing was sent. Help: is the broker up?"
        ) from err
    consumer.assign(ends)
