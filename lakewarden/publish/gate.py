"""What a clean may delete on a table that publishes: only files the published Delta log no
longer names.

A clean deletes superseded files. The version that removes a superseded file from the Delta
view is the version of the instant that superseded it; until that version is published, the
newest published version still lists the file as live, and a Delta reader would meet a missing
file. So before its delete step a clean publishes what it can (``sync``), then holds back every
file that a not yet published version removes: ``RemoveNotPublishedError``, and the clean stays
pending; the next clean run finishes it once publishing caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from lakewarden.errors import LakewardenError, RetryableError
from lakewarden.storage import Storage
from lakewarden.table.config import load_config
from lakewarden.table.timeline import Timeline

from .log import last_version
from .publisher import DeltaPublisher
from .versions import plan_versions

log = logging.getLogger(__name__)


class RemoveNotPublishedError(RetryableError):
    """A clean was about to delete files whose ``remove`` the Delta log does not have yet."""


def unpublished_removals(storage: Storage, timeline: Timeline) -> frozenset[str]:
    """Keys of data files that the published Delta log still names as live although the
    timeline has replaced them (empty when the table does not publish). Publishes first, best
    effort. Raises: StorageError, DeltaLogCorruptError."""
    config = load_config(storage)  # fresh: publishing may have been enabled since opening
    if not config.publish.delta:
        return frozenset()
    publisher = DeltaPublisher(storage, config, timeline)
    try:
        publisher.sync()
    except LakewardenError as err:
        log.warning("table %s: publishing before a clean failed (%s)", config.name, err)
    published = last_version(storage)
    state = timeline.load()
    since = publisher.since_seq(published, state)
    held: set[str] = set()
    for plan in plan_versions(state, since, start=published + 1):
        held.update(f.stat.path for f in plan.removes)
    return frozenset(held)


def check_removes_published(storage: Storage, timeline: Timeline, keys: Collection[str]) -> None:
    """Return when none of ``keys`` is still live in the published Delta log.

    Raises: RemoveNotPublishedError (the clean must wait for the publisher)."""
    held = unpublished_removals(storage, timeline) & set(keys)
    if held:
        sample = ", ".join(sorted(held)[:3])
        raise RemoveNotPublishedError(
            f"{storage.uri}: {len(held)} file(s) to clean are still live in the published "
            f"Delta log ({sample}): their remove is not published yet, so nothing was deleted. "
            f"Help: run `lakewarden publish sync {storage.uri}` (or start the publisher), then "
            "clean again; the pending clean resumes.",
        )
