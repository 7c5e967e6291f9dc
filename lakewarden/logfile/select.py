"""Which blocks of a file slice's log files count (docs/architecture.md, "Log files and block
sequence numbers"; invariant 7).

**The statistics rule** (``select_committed``), for every log file a completed instant names.
The completed deltacommit's write statistics say, per log file, which attempt the commit
accepted and how many blocks it wrote (``CommittedBlocks``). Exactly those blocks count:
header ``INSTANT_TIME`` = the instant, ``ATTEMPT_ID`` = the accepted attempt,
``BLOCK_SEQUENCE_NO`` in ``0 .. count-1``, each sequence number once (the first valid copy:
a file with duplicated bytes repeats blocks). Every other block (a failed, retried,
speculative or zombie attempt's, whatever its count, or an instant that never completed) is
skipped and reported. A committed block that cannot be found is ``MissingCommittedBlockError``:
dropping it silently would lose committed records.

**HUDI-6758's sequence rule** (``select_by_sequence``), only for log files without statistics
(written before the statistics named attempts). Per instant: blocks without
``BLOCK_SEQUENCE_NO`` mean an old writer, and all blocks of the instant are kept; otherwise
blocks are grouped into sequences (by ``ATTEMPT_ID``, or where the sequence number restarts
when that header is absent), the longest sequence is kept (counted in distinct sequence
numbers; corrupt blocks never reach this rule) and the latest on a tie. This is the rule that
lost data in Hudi (apache/hudi#10803): a speculative attempt that Spark did *not* accept may
be the longest or the latest. Hence it is only a fallback.

Both rules return the blocks in the order they apply: instants in completion order, blocks by
sequence number.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from lakewarden.errors import NonRetryableError
from lakewarden.logfile.reader import CorruptRegion, LogBlock, LogScan

__all__ = [
    "CommittedBlocks",
    "MissingCommittedBlockError",
    "Selection",
    "SkippedBlock",
    "select_by_sequence",
    "select_committed",
]

log = logging.getLogger(__name__)


class MissingCommittedBlockError(NonRetryableError):
    """A block that a completed instant's statistics name is not in its log file (or only
    damaged copies are). ``path`` is the log file, ``missing`` the sequence numbers."""

    def __init__(self, message: str, *, instant: str, attempt: str, path: str, missing: list[int]):
        super().__init__(message, instant=instant, attempt=attempt)
        self.path = path
        self.missing = missing


@dataclass(frozen=True, slots=True)
class CommittedBlocks:
    """What a completed instant's statistics say about one log file."""

    path: str
    instant: str
    attempt: str
    block_count: int


@dataclass(frozen=True, slots=True)
class SkippedBlock:
    """A valid block that does not count, and why."""

    block: LogBlock
    reason: str


@dataclass
class Selection:
    """The blocks that count, in the order they apply, and what was left out."""

    blocks: list[LogBlock] = field(default_factory=list)
    skipped: list[SkippedBlock] = field(default_factory=list)
    corrupt: list[CorruptRegion] = field(default_factory=list)

    def report(self) -> None:
        """Log what was left out (one warning per damaged region, one summary line)."""
        for region in self.corrupt:
            log.warning(
                "log file %s: %d bytes at offset %d skipped: %s",
                region.path,
                region.length,
                region.offset,
                region.reason,
            )
        if self.skipped:
            log.info("%d log block(s) of uncommitted attempts skipped", len(self.skipped))


def select_committed(scans: Sequence[LogScan], committed: Sequence[CommittedBlocks]) -> Selection:
    """The statistics rule (module docstring). ``committed`` in completion order.

    Raises: MissingCommittedBlockError."""
    by_path = {scan.path: scan for scan in scans}
    selection = Selection(corrupt=[r for scan in scans for r in scan.corrupt])
    taken: set[int] = set()
    for entry in committed:
        scan = by_path.get(entry.path)
        found: dict[int, LogBlock] = {}
        for block in scan.blocks if scan is not None else ():
            seq = block.sequence_no
            if (
                block.instant == entry.instant
                and block.attempt == entry.attempt
                and seq is not None
                and seq < entry.block_count
            ):
                found.setdefault(seq, block)
        missing = [seq for seq in range(entry.block_count) if seq not in found]
        if missing:
            raise _missing(entry, missing, scan)
        for seq in range(entry.block_count):
            selection.blocks.append(found[seq])
            taken.add(id(found[seq]))
    for scan in scans:
        for block in scan.blocks:
            if id(block) not in taken:
                selection.skipped.append(SkippedBlock(block, _why_skipped(block, committed)))
    return selection


def _why_skipped(block: LogBlock, committed: Sequence[CommittedBlocks]) -> str:
    mine = [c for c in committed if c.path == block.path and c.instant == block.instant]
    if not mine:
        return f"instant {block.instant} has no completed statistics for this file"
    if all(c.attempt != block.attempt for c in mine):
        return f"attempt {block.attempt} is not the committed attempt {mine[0].attempt}"
    return "a duplicate or a block past the committed count"


def _missing(entry: CommittedBlocks, missing: list[int], scan: LogScan | None) -> Exception:
    damage = f"{len(scan.corrupt)} damaged region(s)" if scan is not None else "no such file"
    return MissingCommittedBlockError(
        f"log file {entry.path}: instant {entry.instant} committed {entry.block_count} "
        f"block(s) of attempt {entry.attempt}, but sequence number(s) {missing} are not there "
        f"intact ({damage}). Help: the committed records cannot be read from this file; "
        "restore it from a backup or a replica; nothing was skipped silently.",
        instant=entry.instant,
        attempt=entry.attempt,
        path=entry.path,
        missing=missing,
    )


def select_by_sequence(scans: Sequence[LogScan], instants: Collection[str]) -> Selection:
    """HUDI-6758's rule over the blocks of ``instants`` (completed, in completion order; the
    module docstring). Blocks of other instants are skipped."""
    order = list(instants)
    selection = Selection(corrupt=[r for scan in scans for r in scan.corrupt])
    by_instant: dict[str, list[LogBlock]] = {}
    for scan in scans:
        for block in scan.blocks:
            if block.instant in order:
                by_instant.setdefault(block.instant, []).append(block)
            else:
                reason = f"instant {block.instant} is not a completed instant"
                selection.skipped.append(SkippedBlock(block, reason))
    for instant in order:
        blocks = by_instant.get(instant, [])
        kept = _longest_sequence(blocks)
        kept_ids = {id(b) for b in kept}
        selection.blocks.extend(kept)
        for block in blocks:
            if id(block) not in kept_ids:
                selection.skipped.append(SkippedBlock(block, "not the longest, latest sequence"))
    return selection


def _longest_sequence(blocks: list[LogBlock]) -> list[LogBlock]:
    if any(b.sequence_no is None for b in blocks):
        return list(blocks)  # an old writer: no way to tell duplicates apart
    sequences: list[dict[int, LogBlock]] = []
    if all(b.attempt is not None for b in blocks):
        by_attempt: dict[str | None, dict[int, LogBlock]] = {}
        for block in blocks:
            seq = block.sequence_no
            assert seq is not None
            by_attempt.setdefault(block.attempt, {}).setdefault(seq, block)
        sequences = list(by_attempt.values())
    else:
        previous = -1
        for block in blocks:
            seq = block.sequence_no
            assert seq is not None
            if seq <= previous or not sequences:
                sequences.append({})
            sequences[-1].setdefault(seq, block)
            previous = seq
    best: dict[int, LogBlock] = {}
    for sequence in sequences:  # ">=": the latest wins a tie
        if len(sequence) >= len(best):
            best = sequence
    return [best[seq] for seq in sorted(best)]
