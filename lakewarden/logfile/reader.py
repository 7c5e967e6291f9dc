"""Reading a log file: every valid block, and every stretch of bytes that is not one.

``scan_log`` walks a log file forward. At each position it expects a block
(``lakewarden.logfile._format``); a valid one is kept and skipped by its length. Anything else
(a torn block at the end of a file a writer died in, bit rot, bytes that never were a block)
becomes one ``CorruptRegion`` reaching to the next position where a valid block starts, and
the scan goes on from there: a damaged block never hides the blocks after it and never stops a
read. Which of the valid blocks count is decided elsewhere (``lakewarden.logfile.select``).

``scan_backward`` uses the trailing length to walk from the end of the file towards its start
while the chain of blocks is intact (the last block of a file without reading the rest).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from lakewarden.logfile._format import (
    ATTEMPT_ID,
    BLOCK_SEQUENCE_NO,
    INSTANT_TIME,
    MAGIC,
    MIN_BLOCK_SIZE,
    BlockType,
    decode_records,
    parse_at,
)

__all__ = ["CorruptRegion", "LogBlock", "LogScan", "scan_backward", "scan_log"]


class LogBlock:
    """One valid block of a log file; its content is decoded only when asked (``records``)."""

    __slots__ = ("_data", "block_type", "content", "header", "length", "offset", "path")

    def __init__(
        self,
        path: str,
        offset: int,
        length: int,
        block_type: BlockType,
        header: dict[str, str],
        content: memoryview,
    ) -> None:
        self.path = path
        self.offset = offset
        self.length = length
        self.block_type = block_type
        self.header = header
        self.content = content
        self._data: pa.Table | None = None

    @property
    def instant(self) -> str | None:
        return self.header.get(INSTANT_TIME)

    @property
    def attempt(self) -> str | None:
        return self.header.get(ATTEMPT_ID)

    @property
    def sequence_no(self) -> int | None:
        """``BLOCK_SEQUENCE_NO`` (None when absent or not a non-negative integer)."""
        text = self.header.get(BLOCK_SEQUENCE_NO)
        return int(text) if text is not None and text.isdigit() else None

    def records(self) -> pa.Table:
        """The block's records (data) or keys (delete), decoded once (a block is immutable,
        and a cached scan serves many reads). Raises: pyarrow.ArrowInvalid."""
        if self._data is None:
            self._data = decode_records(self.content)
        return self._data

    def __repr__(self) -> str:
        return (
            f"LogBlock({self.path}@{self.offset}, {self.block_type.name}, "
            f"instant={self.instant}, attempt={self.attempt}, seq={self.sequence_no})"
        )


@dataclass(frozen=True, slots=True)
class CorruptRegion:
    """Bytes ``[offset, offset + length)`` of ``path`` that hold no valid block, and why."""

    path: str
    offset: int
    length: int
    reason: str


@dataclass
class LogScan:
    """What ``scan_log`` found in one file: its valid blocks in file order, and the rest."""

    path: str
    size: int
    blocks: list[LogBlock] = field(default_factory=list)
    corrupt: list[CorruptRegion] = field(default_factory=list)


def scan_log(data: bytes | pa.Buffer, path: str = "") -> LogScan:
    """Every valid block of ``data`` (bytes, or a pyarrow buffer such as a memory-mapped
    file: blocks are views of it, never copies) and every corrupt region between them (module
    docstring). Never raises on damaged bytes."""
    view = memoryview(data)
    scan = LogScan(path, len(data))
    pos = 0
    while pos < len(view):
        parsed = parse_at(view, pos)
        if isinstance(parsed, str):
            resume = _next_block(view, pos + 1)
            scan.corrupt.append(CorruptRegion(path, pos, resume - pos, parsed))
            pos = resume
            continue
        content = view[parsed.content_start : parsed.content_end]
        scan.blocks.append(
            LogBlock(path, pos, parsed.length, parsed.block_type, parsed.header, content)
        )
        pos += parsed.length
    return scan


def _next_block(view: memoryview, start: int) -> int:
    """The first position at or after ``start`` where a valid block begins (end: none).

    The magic may also occur inside content; a candidate counts only if a whole valid block
    (length, trailing length, CRC) starts there."""
    data = view.obj if isinstance(view.obj, bytes) else bytes(view)
    pos = start
    while True:
        pos = data.find(MAGIC, pos)
        if pos < 0 or len(view) - pos < MIN_BLOCK_SIZE:
            return len(view)
        if not isinstance(parse_at(view, pos), str):
            return pos
        pos += 1


def scan_backward(data: bytes, path: str = "") -> Iterator[LogBlock]:
    """Valid blocks from the end of ``data`` backwards, following the trailing lengths; stops
    at the first damaged block (``scan_log`` reads past it)."""
    view = memoryview(data)
    end = len(view)
    while end >= MIN_BLOCK_SIZE:
        length = int.from_bytes(view[end - 4 : end], "big")
        start = end - length
        if length < MIN_BLOCK_SIZE or start < 0:
            return
        parsed = parse_at(view, start)
        if isinstance(parsed, str) or parsed.length != length:
            return
        content = view[parsed.content_start : parsed.content_end]
        yield LogBlock(path, start, length, parsed.block_type, parsed.header, content)
        end = start
