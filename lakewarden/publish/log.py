"""The ``_delta_log/`` directory as lakewarden reads and writes it, through the Storage
contract: versions are created with ``write_if_absent`` only, so of two publishers of one
version exactly one writes it, and a version once written is never replaced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from lakewarden.commit.layout import DELTA_LOG_DIR
from lakewarden.errors import NonRetryableError
from lakewarden.storage import NotFoundError, Storage

LOG_PREFIX = DELTA_LOG_DIR
LAST_CHECKPOINT_KEY = f"{LOG_PREFIX}_last_checkpoint"
_VERSION_RE = re.compile(r"_delta_log/(\d{20})\.json")


class DeltaLogCorruptError(NonRetryableError):
    """The published Delta log is not what lakewarden writes: a version is missing while a
    later one exists, a version is unreadable, or it names another instant than the timeline
    gives it."""


def version_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.json"


def checkpoint_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.checkpoint.parquet"


def _listed_versions(storage: Storage, start_after: str | None) -> Iterator[int]:
    for info in storage.list(LOG_PREFIX, start_after=start_after):
        match = _VERSION_RE.fullmatch(info.key)
        if match:
            yield int(match.group(1))


def last_checkpoint(storage: Storage) -> int | None:
    """The version ``_last_checkpoint`` names, or None (no checkpoint, or unreadable: it is
    only a hint)."""
    try:
        hint = json.loads(storage.read(LAST_CHECKPOINT_KEY))
        version = hint.get("version") if isinstance(hint, dict) else None
    except (NotFoundError, ValueError):
        return None
    return version if isinstance(version, int) and version >= 0 else None


def last_version(storage: Storage) -> int:
    """The newest published version (-1: none), listing from the last checkpoint on (or,
    without ``_last_checkpoint``, from the first version listed: 0, or the checkpoint a
    trimmed log starts at).

    Raises: DeltaLogCorruptError (a version is missing below a later one)."""
    start = last_checkpoint(storage)
    after = version_key(start - 1) if start else None
    expected = start or 0
    for version in _listed_versions(storage, after):
        if version > expected == 0 and storage.exists(checkpoint_key(version)):
            expected = version  # a trimmed log (``retention``) starts at a checkpoint
        if version != expected:
            raise DeltaLogCorruptError(
                f"{storage.uri}: Delta version {expected} is missing while version {version} "
                "exists. Help: the Delta log was changed by something other than lakewarden; "
                "move _delta_log/ aside and run `lakewarden publish sync` to write it anew."
            )
        expected += 1
    return expected - 1


def read_txn_version(storage: Storage, version: int) -> int | None:
    """The ``txn`` version (the timeline seq) recorded in ``version``, None when it has none.

    Raises: NotFoundError, DeltaLogCorruptError."""
    data = storage.read(version_key(version))
    try:
        for line in data.decode("utf-8").splitlines():
            action = json.loads(line) if line.strip() else {}
            txn = action.get("txn")
            if isinstance(txn, dict) and txn.get("appId") == "lakewarden":
                value = txn.get("version")
                return value if isinstance(value, int) else None
    except (UnicodeDecodeError, ValueError, AttributeError) as err:
        raise DeltaLogCorruptError(
            f"{storage.uri}: {version_key(version)} is not a Delta commit: {err}. Help: move "
            "_delta_log/ aside and run `lakewarden publish sync` to write it anew."
        ) from err
    return None
