"""The byte layout of one log block, and its encoding.

A block, all integers big-endian::

    offset  size  field
    0       6     magic  b"#LWLB#"
    6       4     total length L of the block, magic to trailing length inclusive
    10      2     format version (1)
    12      1     block type: 1 data, 2 delete, 3 command
    13      4     header length H
    17      H     header: a JSON object of string -> string (INSTANT_TIME, ATTEMPT_ID,
                  BLOCK_SEQUENCE_NO, SCHEMA, ...)
    17+H    8     content length C
    25+H    C     content: an Arrow IPC stream (data: the records; delete: the record keys)
    25+H+C  4     CRC32 of bytes 0 .. 25+H+C (everything before it)
    29+H+C  4     total length L again, so a reader at the end of a file can step backwards

The length at the front lets a forward scan skip a block without parsing it; the CRC covers the
header and content, so a torn write (a block cut short) and bit rot are told apart from a valid
block; the trailing length must equal the leading one (a cheap check before the CRC).
"""

from __future__ import annotations

import json
import struct
import zlib
from enum import IntEnum

import pyarrow as pa

MAGIC = b"#LWLB#"
FORMAT_VERSION = 1
_PREFIX = struct.Struct(">6sIHBI")  # magic, length, version, type, header length
_CONTENT_LEN = struct.Struct(">Q")
_TRAILER = struct.Struct(">II")  # crc32, length
PREFIX_SIZE = _PREFIX.size
TRAILER_SIZE = _TRAILER.size
MIN_BLOCK_SIZE = PREFIX_SIZE + _CONTENT_LEN.size + TRAILER_SIZE
MAX_BLOCK_SIZE = (1 << 32) - 1

# Header keys (Hudi's names, so people who know Hudi's log format read ours).
INSTANT_TIME = "INSTANT_TIME"
ATTEMPT_ID = "ATTEMPT_ID"
BLOCK_SEQUENCE_NO = "BLOCK_SEQUENCE_NO"
SCHEMA = "SCHEMA"
COMMAND = "COMMAND"


class BlockType(IntEnum):
    """What a block's content means."""

    DATA = 1  # records to merge (upsert)
    DELETE = 2  # record keys to delete
    COMMAND = 3  # no records: a marker (e.g. a rollback), the command in the COMMAND header


class BlockTooLargeError(ValueError):
    """A block would not fit the format's 32-bit length."""


def encode_block(block_type: BlockType, header: dict[str, str], content: bytes) -> bytes:
    """The bytes of one block. Raises: BlockTooLargeError."""
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    total = MIN_BLOCK_SIZE + len(header_bytes) + len(content)
    if total > MAX_BLOCK_SIZE:
        raise BlockTooLargeError(
            f"a log block of {total} bytes exceeds {MAX_BLOCK_SIZE}; write smaller blocks"
        )
    body = b"".join(
        (
            _PREFIX.pack(MAGIC, total, FORMAT_VERSION, int(block_type), len(header_bytes)),
            header_bytes,
            _CONTENT_LEN.pack(len(content)),
            content,
        )
    )
    return body + _TRAILER.pack(zlib.crc32(body), total)


def encode_records(table: pa.Table) -> bytes:
    """An Arrow IPC stream of ``table`` (the content of a data or delete block)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def decode_records(content: bytes | memoryview) -> pa.Table:
    """Inverse of ``encode_records``. Raises: pyarrow.ArrowInvalid."""
    with pa.ipc.open_stream(pa.py_buffer(content)) as reader:
        return reader.read_all()


class _Parsed:
    """A block parsed in place (``parse_at``)."""

    __slots__ = ("block_type", "content_end", "content_start", "header", "length")

    def __init__(
        self,
        length: int,
        block_type: BlockType,
        header: dict[str, str],
        content_start: int,
        content_end: int,
    ) -> None:
        self.length = length
        self.block_type = block_type
        self.header = header
        self.content_start = content_start
        self.content_end = content_end


def parse_at(data: memoryview, pos: int) -> _Parsed | str:
    """The block starting at ``pos``, or the reason it is not a valid block there."""
    if len(data) - pos < MIN_BLOCK_SIZE:
        return "torn: fewer bytes left than the smallest block"
    magic, length, version, type_code, header_len = _PREFIX.unpack_from(data, pos)
    if magic != MAGIC:
        return "no block magic"
    if length < MIN_BLOCK_SIZE:
        return f"block length {length} is below the minimum"
    if pos + length > len(data):
        return f"torn: the block claims {length} bytes, {len(data) - pos} remain"
    end = pos + length
    crc, trailing = _TRAILER.unpack_from(data, end - TRAILER_SIZE)
    if trailing != length:
        return f"trailing length {trailing} differs from leading length {length}"
    if zlib.crc32(data[pos : end - TRAILER_SIZE]) != crc:
        return "CRC32 mismatch"
    if version != FORMAT_VERSION:
        return f"unknown format version {version}"
    try:
        block_type = BlockType(type_code)
    except ValueError:
        return f"unknown block type {type_code}"
    header_start = pos + PREFIX_SIZE
    content_len_at = header_start + header_len
    if content_len_at + _CONTENT_LEN.size > end - TRAILER_SIZE:
        return "header length overruns the block"
    (content_len,) = _CONTENT_LEN.unpack_from(data, content_len_at)
    content_start = content_len_at + _CONTENT_LEN.size
    if content_start + content_len != end - TRAILER_SIZE:
        return "content length does not fill the block"
    try:
        header = json.loads(bytes(data[header_start:content_len_at]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "header is not JSON"
    if not isinstance(header, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in header.items()
    ):
        return "header is not a map of strings"
    return _Parsed(length, block_type, header, content_start, content_start + content_len)
