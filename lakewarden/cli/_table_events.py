"""What ``lakewarden history``, ``explain`` and ``replay`` share: the table behind a URI, a
``--since`` time, and the bounded read of the table's events from Kafka."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import click

from lakewarden.events.topics import TOPICS, TopicSpec
from lakewarden.history import (
    Recorded,
    RetentionGap,
    TableHistory,
    Unreadable,
    batch_mode,
    build_history,
    read_table_events,
)
from lakewarden.settings import Settings
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.instant import Instant, InvalidInstantError

Item = Recorded | Unreadable | RetentionGap

SINCE_HELP = (
    "Only events from this time on: an instant time (17 digits) or an ISO-8601 time "
    "(UTC unless it says otherwise). Default: from the beginning of every topic."
)


def parse_since(text: str | None) -> int | None:
    """``--since`` as epoch ms.

    Raises: click.BadParameter."""
    if text is None:
        return None
    if text.isdigit() and len(text) == 17:
        try:
            return Instant.parse(text).epoch_ms
        except InvalidInstantError as err:
            raise click.BadParameter(str(err), param_hint="--since") from err
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as err:
        raise click.BadParameter(
            f"{text!r} is neither an instant time (yyyyMMddHHmmssSSS) nor an ISO-8601 time",
            param_hint="--since",
        ) from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def check_since(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a bad ``--since`` is a usage error before the table is opened.

    Raises: click.BadParameter."""
    parse_since(value)
    return value


def open_table(uri: str, settings: Settings) -> tuple[Storage, TableConfig]:
    """The table's storage and config.

    Raises: NotATableError, StorageError."""
    storage = open_storage(uri, settings)
    return storage, load_config(storage)


def table_events(
    settings: Settings,
    config: TableConfig,
    *,
    since: str | None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    topics: Iterable[TopicSpec] = TOPICS,
) -> list[Item]:
    """Every event of the table on ``topics``, read now (from ``since``, a user's text, or
    else from ``since_ms``; from the oldest kept when both are None; up to ``until_ms``, or
    to the end when None).

    Raises: ConfigurationError (Kafka not configured), RetryableError, ReadTimeoutError."""
    with batch_mode():
        return list(
            read_table_events(
                settings,
                config.table_id,
                since_ms=parse_since(since) if since is not None else since_ms,
                until_ms=until_ms,
                topics=topics,
            )
        )


def table_history(
    settings: Settings,
    config: TableConfig,
    *,
    since: str | None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> TableHistory:
    """The table's history folded from every topic, read now (in ``batch_mode``).

    Raises: ConfigurationError (Kafka not configured), RetryableError, ReadTimeoutError."""
    with batch_mode():
        items = table_events(settings, config, since=since, since_ms=since_ms, until_ms=until_ms)
        return build_history(config.table_id, items)
