"""Delta's log retention follows lakewarden's: once cleans made every version before a
checkpoint unreadable (a file it names was deleted by a completed clean), the JSON versions
and checkpoints before that checkpoint are deleted.

Protocol of ``trim_log`` (run by a clean after it completed, best effort):

1. list ``_delta_log/``: the JSON versions, the checkpoints, and the newest checkpoint
   ``_last_checkpoint`` names (none: nothing to do). The log a reader can start from begins
   at version 0 (its JSON exists) or else at the oldest checkpoint no older than the oldest
   JSON; anything before that start is debris of an interrupted trim;
2. replay from that start to the newest version, keeping for every live file the version that
   added it; a file a completed clean deleted (``cleaned_by``) makes the versions from its
   ``add`` up to the one before its ``remove`` unreadable, in Delta as in lakewarden;
3. the oldest readable version ``r`` is the first version no such range covers (version 0 of a
   table created with publishing on holds no file and no instant: it counts as unreadable);
4. the cut ``c`` is the newest checkpoint with ``c <= r`` and ``c <=`` the newest checkpoint;
   delete the JSON versions before ``c`` in ascending order, then the checkpoints before ``c``.

So the newest checkpoint and everything after it are never deleted, every version from ``r`` on
stays readable (it is at or after the checkpoint ``c``), and a trim killed at any point leaves
a log that starts at a checkpoint (step 1 finishes the job). ``_last_checkpoint`` is not
touched. Without version 0, the publisher learns what version 0 held from the checkpoint
(``DeltaPublisher.since_seq``).
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
from dataclasses import dataclass

from lakewarden.errors import LakewardenError
from lakewarden.storage import NotFoundError, Storage
from lakewarden.table.clean.retention import cleaned_by
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.instant import Action
from lakewarden.table.timeline import Timeline
from lakewarden.table.timeline_state import TimelineState

from .checkpoint import checkpoint_state
from .log import LOG_PREFIX, checkpoint_key, last_checkpoint, version_key

log = logging.getLogger(__name__)

_FILE_RE = re.compile(r"_delta_log/(\d{20})\.(json|checkpoint\.parquet)")


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What ``trim_log`` did: the version the log now starts at (None: nothing to trim) and
    the keys it deleted."""

    start: int | None
    deleted: tuple[str, ...] = ()


def _listing(storage: Storage) -> tuple[list[int], list[int]]:
    jsons: list[int] = []
    checkpoints: list[int] = []
    for info in storage.list(LOG_PREFIX):
        match = _FILE_RE.fullmatch(info.key)
        if match:
            (jsons if match.group(2) == "json" else checkpoints).append(int(match.group(1)))
    return sorted(jsons), sorted(checkpoints)


def _completed_cleans(state: TimelineState) -> frozenset[str]:
    """Keys of the files completed cleans deleted."""
    return frozenset(
        path
        for path, clean in cleaned_by(state).items()
        if clean.action is Action.CLEAN and clean.completed_seq is not None
    )


def oldest_readable(storage: Storage, state: TimelineState, start: int, newest: int) -> int:
    """Steps 2-3: the oldest version from ``start`` to ``newest`` that no cleaned file makes
    unreadable (``newest + 1``: none). Raises: StorageError, ValueError."""
    cleaned = _completed_cleans(state)
    live: dict[str, int] = {}  # path -> the version that added it
    covered_to = start - 1  # versions start..covered_to are unreadable (ranges merged below)
    ranges: list[tuple[int, int]] = []
    if start > 0:
        snapshot = checkpoint_state(storage, start)
        if snapshot is None:
            raise NotFoundError(f"{checkpoint_key(start)} is unreadable", key=checkpoint_key(start))
        live = dict.fromkeys(snapshot["adds"], start)
    first = start + 1 if start > 0 else 0
    for version in range(first, newest + 1):
        for line in storage.read(version_key(version)).decode("utf-8").splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                live[action["add"]["path"]] = version
            elif "remove" in action:
                path = action["remove"]["path"]
                added = live.pop(path, None)
                if added is not None and urllib.parse.unquote(path) in cleaned:
                    ranges.append((added, version - 1))
        if version == 0 and not live:
            ranges.append((0, 0))  # the empty table before the first instant
    for path, added in live.items():  # a cleaned file still live: every version since
        if urllib.parse.unquote(path) in cleaned:
            ranges.append((added, newest))
    for low, high in sorted(ranges):
        if low > covered_to + 1:
            break
        covered_to = max(covered_to, high)
    return covered_to + 1


def trim_log(storage: Storage, config: TableConfig, state: TimelineState) -> TrimResult:
    """Steps 1-4 of the module docstring. Raises: StorageError, ValueError."""
    newest_checkpoint = last_checkpoint(storage)  # 1.
    jsons, checkpoints = _listing(storage)
    if newest_checkpoint is None or not jsons:
        return TrimResult(None)
    if jsons[0] == 0:
        start = 0
    else:
        start = next((c for c in checkpoints if c >= jsons[0]), -1)
        if start < 0 or start > newest_checkpoint:
            return TrimResult(None)  # not a log lakewarden trimmed: leave it alone
    readable = oldest_readable(storage, state, start, jsons[-1])  # 2., 3.
    cut = max(
        (c for c in checkpoints if start <= c <= min(readable, newest_checkpoint)), default=None
    )
    cut = cut if cut is not None else start  # 4.
    doomed = [version_key(v) for v in jsons if v < cut]
    doomed += [checkpoint_key(v) for v in checkpoints if v < cut]
    for key in doomed:
        try:
            storage.delete(key)
        except NotFoundError:
            pass
    if doomed:
        log.info("table %s: Delta log now starts at version %d", config.name, cut)
    return TrimResult(cut, tuple(doomed))


def trim_after_clean(storage: Storage, timeline: Timeline) -> TrimResult | None:
    """Best effort after a completed clean on a table that publishes: ``trim_log``; a failure
    is logged (the next clean trims)."""
    try:
        config = load_config(storage)
        if not config.publish.delta:
            return None
        return trim_log(storage, config, timeline.load())
    except (LakewardenError, OSError, ValueError, KeyError) as err:
        log.warning("%s: trimming the Delta log failed (%s)", storage.uri, err)
        return None
