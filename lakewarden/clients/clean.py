"""Asking the cleaner service to clean a table: a ``CleanRequest`` on ``clean.requests``.

    request_clean(settings, table_id=table.table_id, table_uri=table.uri,
                  policy="keep-latest-commits=5", requested_by="scheduler")

The request also registers the table with the cleaner: its owner sweeps it periodically from
then on. Keyed by table id, so the instance that owns the table receives it.
"""

from __future__ import annotations

import os
import socket

from lakewarden.events import EventProducer, make_event
from lakewarden.settings import Settings


def request_clean(
    settings: Settings,
    *,
    table_id: str,
    table_uri: str,
    policy: str | None = None,
    delete_orphans: bool = False,
    requested_by: str | None = None,
    producer: EventProducer | None = None,
) -> None:
    """Publish a ``CleanRequest`` and wait until the broker has it.

    Raises: ConfigurationError (Kafka not configured), EventDeliveryError, RetryableError."""
    who = requested_by or f"lakewarden@{socket.gethostname()}:{os.getpid()}"
    client = producer or EventProducer(settings, producer_id=who)
    record = make_event(
        "CleanRequest",
        table_id=table_id,
        producer_id=who,
        table_uri=table_uri,
        policy=policy,
        delete_orphans=delete_orphans,
        requested_by=who,
    )
    client.send("CleanRequest", record)
    client.flush()


__all__ = ["request_clean"]
