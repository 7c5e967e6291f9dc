"""Turning publishing on: at create (``TableConfig.publish.delta``) or for an existing table.

``enable`` for an existing table:

1. check that the schema has a Delta counterpart (``UnpublishableSchemaError`` otherwise);
2. load the timeline: its tail seq is ``since_seq``, what version 0 will hold;
3. rewrite ``table.json`` with ``publish.delta`` on (the one setting lakewarden ever
   rewrites: processes that opened the table before it publish nothing until reopened; the
   next ``sync`` catches up for them);
4. publish: version 0 with the snapshot as of ``since_seq`` (it records ``since_seq`` in its
   ``txn``, which is the word every publisher goes by), then any instant completed since.

Enabling a table that publishes already only syncs.

A process that commits publishes the versions its ``completed`` entries make
(``publisher_on_commit``): right after each entry (``attach``, as every ``TableHandle`` opens
a table), or, for job-committer, once it has answered the writer.
"""

from __future__ import annotations

import os

from lakewarden.storage import Storage
from lakewarden.table import read_manifest
from lakewarden.table.config import CONFIG_KEY, PublishConfig, TableConfig
from lakewarden.table.snapshot import SnapshotCache
from lakewarden.table.timeline import Timeline, TimelineEntry

from .publisher import DeltaPublisher, PublishResult
from .schema import protocol_action, schema_string


def enable(storage: Storage, config: TableConfig, timeline: Timeline) -> PublishResult:
    """Steps 1-4 of the module docstring; returns the first sync's result.

    Raises: UnpublishableSchemaError, DeltaLogCorruptError, StorageError."""
    if not config.publish.delta:
        schema_string(config.pa_schema)  # 1.
        protocol_action(config.pa_schema)
        tail = timeline.load().tail_seq  # 2.
        publish = PublishConfig(
            delta=True, since_seq=tail, checkpoint_interval=config.publish.checkpoint_interval
        )
        config = config.model_copy(update={"publish": publish})
        storage.write(CONFIG_KEY, config.to_json())  # 3.
    return DeltaPublisher(storage, config, timeline).sync()  # 4.


PUBLISH_ON_COMMIT_ENV = "LAKEWARDEN_PUBLISH_ON_COMMIT"


def publishes_on_commit() -> bool:
    """Whether this process's commits publish their versions: yes unless
    ``LAKEWARDEN_PUBLISH_ON_COMMIT`` is ``false``/``0``/``no``/``off`` (writers that leave
    publishing to the publisher service, and spend nothing on it in the commit)."""
    value = os.environ.get(PUBLISH_ON_COMMIT_ENV, "true").strip().lower()
    return value not in ("false", "0", "no", "off")


def publisher_on_commit(
    storage: Storage, config: TableConfig, timeline: Timeline
) -> DeltaPublisher | None:
    """The publisher of the versions this process's commits complete: None when the table does
    not publish, or the process leaves publishing to the publisher service
    (``publishes_on_commit``)."""
    if not (config.publish.delta and publishes_on_commit()):
        return None
    return DeltaPublisher(storage, config, timeline)


def attach(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    snapshots: SnapshotCache,
    *,
    publish: bool = True,
) -> None:
    """Make ``timeline`` publish after each ``completed`` entry this process appends
    (``Timeline.after_completed``; ``publisher_on_commit`` says whether it does); and, for
    every table on local storage, write the latest snapshot's read manifest
    (``lakewarden.table.read_manifest``: what the JVM side of the Spark format reads; from the
    table's ``snapshots``). ``publish=False``: the read manifest only, for a caller that
    publishes later itself (job-committer answers its writer first)."""
    manifest = read_manifest.hook(storage, config, timeline, snapshots)
    publisher = publisher_on_commit(storage, config, timeline) if publish else None
    if publisher is None:
        timeline.after_completed = manifest
        return
    if manifest is None:
        timeline.after_completed = publisher.after_completed
        return

    def after_completed(entry: TimelineEntry) -> None:
        publisher.after_completed(entry)
        manifest(entry)

    timeline.after_completed = after_completed
