"""How many records a micro-batch of a Kafka source holds, from the query's checkpoint, before
any of its rows is read.

Structured Streaming writes a batch's end offsets to ``<checkpoint>/offsets/<batch>`` before it
runs the batch (its write-ahead log), and the batch starts where the previous one ended
(``offsets/<batch - 1>``), or, for batch 0, at the source's initial offsets
(``sources/0/0``). The difference, summed over the topic's partitions, is the batch's record
count (an upper bound on a compacted or transactional topic, where offsets have gaps). This
lets ``MicroBatchWriter`` write a small batch with one task (one file per file group) without
a counting job over the batch.

Only a local checkpoint of a query with one Kafka source is read; for anything else (another
source, a remote checkpoint, a log this code does not understand) the answer is None, and the
caller falls back to what it knows (the query's cap on a batch).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("lakewarden.spark")

__all__ = ["batch_records"]

# Offsets of one Kafka source: topic -> partition -> next offset.
_Offsets = dict[str, dict[str, int]]
_OFFSET_LOG_LINES = 3
_INITIAL_LINES = 2


def batch_records(checkpoint: str, batch_id: int) -> int | None:
    """Records of micro-batch ``batch_id`` of the query checkpointed at ``checkpoint``, or
    None when the checkpoint cannot tell (module docstring). Never raises for a bad log."""
    root = Path(checkpoint)
    if not checkpoint or not root.is_dir():
        return None
    end = _read(root / "offsets" / str(batch_id), _OFFSET_LOG_LINES)
    if batch_id == 0:
        start = _read(root / "sources" / "0" / "0", _INITIAL_LINES)
    else:
        start = _read(root / "offsets" / str(batch_id - 1), _OFFSET_LOG_LINES)
    if end is None or start is None:
        return None
    total = 0
    for topic, partitions in end.items():
        for partition, until in partitions.items():
            since = start.get(topic, {}).get(partition)
            if since is None or until < since:
                return None  # a new partition, or offsets reset: not this code's to guess
            total += until - since
    return total


def _read(path: Path, expected_lines: int) -> _Offsets | None:
    """The Kafka offsets of one log file: its last line (an offset log's lines are its version,
    the batch's metadata and one line per source, so a query of one source has 3; an
    initial-offsets file is ``v1`` then the offsets, after a zero byte that Spark writes for
    compatibility)."""
    try:
        text = path.read_bytes().lstrip(b"\x00").decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != expected_lines or not lines[0].startswith("v"):
        return None
    try:
        raw = json.loads(lines[-1])
    except ValueError:
        return None
    if not isinstance(raw, dict) or not raw:
        return None
    offsets: _Offsets = {}
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            return None  # another source's offset (a file source's {"logOffset": 3})
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool):
                return None
            offsets.setdefault(str(topic), {})[str(partition)] = offset
    return offsets
