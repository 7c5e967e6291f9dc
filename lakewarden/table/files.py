"""File ids, write tokens and data file names (the layout in docs/architecture.md, "Table layout").

- **File ids.** With a bucket index the file id is a function of the bucket alone,
  ``<bucket:08d>-0000`` (``bucket_file_id``): every writer that touches a bucket of a partition
  names the *same* file group, so the conflict rules see two writers of one bucket as overlapping.
  Writes without an index (bulk inserts) take a fresh uuid4 (``new_file_id``). File ids never
  contain ``_``, ``/`` or ``.``, which is what makes the names below parseable.
- **Write tokens** are Hudi's ``<taskPartition>-<stageId>-<attempt>``: distinct attempts that
  write the same file group at the same instant produce distinct names.
- **Base file:** ``<partition path>/<fileId>_<writeToken>_<instant>.parquet``.
- **Log file:** ``<partition path>/.<fileId>_<baseInstant>.log.<version>_<writeToken>_<instant>``:
  the slice's base instant, then the deltacommit that wrote it (one file per instant and task
  attempt, so a rolled-back instant's log files are found by name, as its base files are).
  Files written before the instant was named end at the write token (``instant`` None).

``parse_*`` and ``render`` round-trip; a malformed name raises ``MalformedFileNameError``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from lakewarden.errors import NonRetryableError

BASE_FILE_EXTENSION = ".parquet"

_FILE_ID = r"[A-Za-z0-9-]+"
_NUM = r"(?:0|[1-9]\d*)"
_TOKEN = rf"{_NUM}-{_NUM}-{_NUM}"
_INSTANT = r"\d{17}"
_BASE_RE = re.compile(rf"(?P<fid>{_FILE_ID})_(?P<tok>{_TOKEN})_(?P<inst>{_INSTANT})\.parquet")
_LOG_RE = re.compile(
    rf"\.(?P<fid>{_FILE_ID})_(?P<inst>{_INSTANT})\.log\.(?P<ver>[1-9]\d*)_(?P<tok>{_TOKEN})"
    rf"(?:_(?P<by>{_INSTANT}))?"
)
_FILE_ID_RE = re.compile(_FILE_ID)
_INSTANT_RE = re.compile(_INSTANT)


class MalformedFileNameError(NonRetryableError):
    """A name (or file id, write token, instant) does not follow the layout."""


def bucket_file_id(bucket: int) -> str:
    """The file id of bucket ``bucket`` (the same in every partition and for every writer)."""
    if bucket < 0:
        raise ValueError(f"bucket must be >= 0, got {bucket}")
    return f"{bucket:08d}-0000"


def new_file_id() -> str:
    """A fresh file id for a file group that no index assigns (bulk insert)."""
    return str(uuid.uuid4())


def check_file_id(file_id: str) -> str:
    """Return ``file_id``. Raises: MalformedFileNameError when it could break a file name."""
    if not _FILE_ID_RE.fullmatch(file_id):
        raise MalformedFileNameError(
            f"file id {file_id!r} must be non-empty and use only letters, digits and '-'"
        )
    return file_id


def _check_instant(instant: str) -> str:
    if not _INSTANT_RE.fullmatch(instant):
        raise MalformedFileNameError(f"instant {instant!r} is not a 17-digit instant time")
    return instant


@dataclass(frozen=True, slots=True, order=True)
class WriteToken:
    """``<taskPartition>-<stageId>-<attempt>``: which task attempt wrote a file."""

    task_partition: int
    stage_id: int
    attempt: int

    def __post_init__(self) -> None:
        if min(self.task_partition, self.stage_id, self.attempt) < 0:
            raise MalformedFileNameError(f"write token parts must be >= 0: {self!r}")

    def __str__(self) -> str:
        return f"{self.task_partition}-{self.stage_id}-{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> WriteToken:
        """Raises: MalformedFileNameError."""
        if not re.fullmatch(_TOKEN, text):
            raise MalformedFileNameError(
                f"write token {text!r} is not '<taskPartition>-<stageId>-<attempt>'"
            )
        a, b, c = (int(p) for p in text.split("-"))
        return cls(a, b, c)


@dataclass(frozen=True, slots=True)
class BaseFileName:
    """``<fileId>_<writeToken>_<instant>.parquet``."""

    file_id: str
    write_token: WriteToken
    instant: str

    def __post_init__(self) -> None:
        check_file_id(self.file_id)
        _check_instant(self.instant)

    def render(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}{BASE_FILE_EXTENSION}"

    @classmethod
    def parse(cls, name: str) -> BaseFileName:
        """Parse a file name (no directory part). Raises: MalformedFileNameError."""
        m = _BASE_RE.fullmatch(name)
        if m is None:
            raise MalformedFileNameError(
                f"{name!r} is not a base file name '<fileId>_<writeToken>_<instant>.parquet'"
            )
        return cls(m["fid"], WriteToken.parse(m["tok"]), m["inst"])


@dataclass(frozen=True, slots=True)
class LogFileName:
    """``.<fileId>_<baseInstant>.log.<version>_<writeToken>[_<instant>]`` (version counts
    from 1; ``instant``, the deltacommit that wrote the file, is None in older names)."""

    file_id: str
    base_instant: str
    version: int
    write_token: WriteToken
    instant: str | None = None

    def __post_init__(self) -> None:
        check_file_id(self.file_id)
        _check_instant(self.base_instant)
        if self.instant is not None:
            _check_instant(self.instant)
        if self.version < 1:
            raise MalformedFileNameError(f"log file version must be >= 1, got {self.version}")

    def render(self) -> str:
        name = f".{self.file_id}_{self.base_instant}.log.{self.version}_{self.write_token}"
        return name if self.instant is None else f"{name}_{self.instant}"

    @classmethod
    def parse(cls, name: str) -> LogFileName:
        """Parse a file name (no directory part). Raises: MalformedFileNameError."""
        m = _LOG_RE.fullmatch(name)
        if m is None:
            raise MalformedFileNameError(
                f"{name!r} is not a log file name "
                "'.<fileId>_<baseInstant>.log.<version>_<writeToken>[_<instant>]'"
            )
        return cls(m["fid"], m["inst"], int(m["ver"]), WriteToken.parse(m["tok"]), m["by"])


def written_by(name: str) -> str | None:
    """The instant whose write a data file name says it is (a base file's instant, a log
    file's deltacommit), or None (not a data file name, or a log file named before its
    instant was)."""
    try:
        return BaseFileName.parse(name).instant
    except MalformedFileNameError:
        pass
    try:
        return LogFileName.parse(name).instant
    except MalformedFileNameError:
        return None


def file_key(partition_path: str, name: str) -> str:
    """The key of a data file relative to the table root."""
    return f"{partition_path}/{name}" if partition_path else name


def split_key(key: str) -> tuple[str, str]:
    """``(partition path, file name)`` of a data file key."""
    partition, _, name = key.rpartition("/")
    return partition, name


def is_log_file(name: str) -> bool:
    return name.startswith(".") and ".log." in name
