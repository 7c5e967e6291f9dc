"""Waiting until every broker of the local stack agrees on the topics.

A KRaft cluster acknowledges a topic creation once its controllers committed it; each broker
learns it later, when it applies the metadata log. A client that asks "any broker" right
after ``dev up`` (the services starting, a test reading partition replicas or a topic's
configs) may ask one that does not know the topic yet: three fresh-clone CI runs of the
three-broker test failed that way at three different steps. So ``dev up`` returns only once
each broker, asked through a client bootstrapped from its address alone, lists every topic
with all its partitions, each with a leader and every replica in sync.

Asking one broker: a client bootstrapped from one address speaks to that broker only until
it needs another (librdkafka's sparse connections), so its metadata requests are answered
from that broker's own view.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lakewarden.devstack.errors import DevStackError
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka.admin import AdminClient
except ImportError as err:
    raise missing_extra("dev", "The dev stack", err) from err

log = logging.getLogger(__name__)

__all__ = ["topics_lagging", "wait_topics_settled"]


def topics_lagging(metadata: Any, partitions: Mapping[str, int], *, replication: int) -> list[str]:
    """What one broker's metadata still lacks: a line per topic that is missing, short of
    partitions, or has a partition without a leader or with fewer in-sync replicas than
    ``replication``. Empty once that broker has settled."""
    lagging = []
    for topic, count in sorted(partitions.items()):
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            lagging.append(f"{topic}: unknown")
            continue
        if len(found.partitions) < count:
            lagging.append(f"{topic}: {len(found.partitions)} of {count} partitions")
            continue
        short = sorted(
            p.id
            for p in found.partitions.values()
            if p.leader < 0 or len(p.replicas) < replication or len(p.isrs) < replication
        )
        if short:
            lagging.append(f"{topic}: partitions {short} without a leader or full ISR")
    return lagging


def wait_topics_settled(
    settings: Settings,
    servers: Sequence[str],
    partitions: Mapping[str, int],
    *,
    replication: int,
    timeout_s: float,
) -> None:
    """Wait until every broker of ``servers`` lists every topic of ``partitions`` (name to
    partition count) settled (``topics_lagging`` is empty).

    Raises:
        DevStackError: some broker had not settled within ``timeout_s`` (what it lacked).
    """
    deadline = time.monotonic() + timeout_s
    for server in servers:
        kafka = settings.kafka.model_copy(update={"bootstrap_servers": server})
        admin = AdminClient(kafka.librdkafka_config(logger=log))
        lagging = ["no answer yet"]
        while lagging:
            try:
                metadata = admin.list_topics(
                    timeout=max(1.0, min(10.0, deadline - time.monotonic()))
                )
                lagging = topics_lagging(metadata, partitions, replication=replication)
            except Exception as err:  # noqa: BLE001 - KafkaException while it settles
                lagging = [f"no metadata: {err}"]
            if not lagging:
                break
            if time.monotonic() >= deadline:
                raise DevStackError(
                    f"Kafka broker {server} did not agree on the topics within {timeout_s:g} s: "
                    + "; ".join(lagging[:5])
                )
            time.sleep(0.2)
    log.info("every broker knows the topics", extra={"brokers": len(servers)})
