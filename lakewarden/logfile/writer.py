"""Writing one task attempt's blocks into a log file.

A ``LogWriter`` collects the blocks one attempt writes for one file slice at one instant,
numbering them ``BLOCK_SEQUENCE_NO`` 0, 1, 2, ... (HUDI-6758: every attempt starts again at 0)
and stamping every header with ``INSTANT_TIME`` and ``ATTEMPT_ID``. ``flush`` writes them with
one storage call:

- ``append=False`` (what ``lakewarden.table.mor`` writes on every store): a new log file
  version, created only if absent, so an attempt never overwrites another attempt's file and
  a file holds one instant's blocks.
- ``append=True`` (a store with ``capabilities.append``): appended to an existing log file, as
  Hudi does on HDFS and as earlier lakewarden versions did on a local filesystem. A retried,
  speculative or zombie attempt appending beside committed blocks changes no read: readers
  take only the blocks the completed instant's statistics name.

``flush`` returns the ``LogWrite`` the write statistics are built from: the key, the attempt,
how many blocks and how many bytes it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lakewarden.logfile._format import (
    ATTEMPT_ID,
    BLOCK_SEQUENCE_NO,
    COMMAND,
    INSTANT_TIME,
    SCHEMA,
    BlockType,
    encode_block,
    encode_records,
)
from lakewarden.storage import Storage

__all__ = ["LogWrite", "LogWriter"]


@dataclass(frozen=True, slots=True)
class LogWrite:
    """What one attempt wrote into one log file."""

    key: str
    instant: str
    attempt: str
    block_count: int
    size_bytes: int
    created: bool  # the attempt created the file (not an append to an existing one)


class LogWriter:
    """The blocks of one attempt for one log file (module docstring)."""

    def __init__(
        self,
        storage: Storage,
        key: str,
        *,
        instant: str,
        attempt: str,
        append: bool,
        schema: str | None = None,
    ) -> None:
        self._storage = storage
        self._key = key
        self._instant = instant
        self._attempt = attempt
        self._append = append
        self._schema = schema
        self._blocks: list[bytes] = []

    def _header(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        header = {
            INSTANT_TIME: self._instant,
            ATTEMPT_ID: self._attempt,
            BLOCK_SEQUENCE_NO: str(len(self._blocks)),
        }
        if self._schema is not None:
            header[SCHEMA] = self._schema
        return header | (extra or {})

    def add_data(self, records: pa.Table) -> None:
        """A data block of ``records`` (merged on read like an upsert)."""
        self._blocks.append(encode_block(BlockType.DATA, self._header(), encode_records(records)))

    def add_delete(self, keys: pa.Table) -> None:
        """A delete block of ``keys`` (the meta record key and partition path columns)."""
        self._blocks.append(encode_block(BlockType.DELETE, self._header(), encode_records(keys)))

    def add_command(self, command: str) -> None:
        """A command block (no records)."""
        header = self._header({COMMAND: command})
        self._blocks.append(encode_block(BlockType.COMMAND, header, b""))

    @property
    def block_count(self) -> int:
        return len(self._blocks)

    def flush(self) -> LogWrite:
        """Write the blocks (one storage call).

        Raises: AlreadyExistsError (``append=False`` and the file exists), StorageError."""
        data = b"".join(self._blocks)
        if self._append:
            created = not self._storage.exists(self._key)
            self._storage.append(self._key, data)
        else:
            created = True
            self._storage.write_if_absent(self._key, data)
        return LogWrite(
            self._key, self._instant, self._attempt, len(self._blocks), len(data), created
        )
