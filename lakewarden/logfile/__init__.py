"""Merge-on-read log files: the block format, a writer, a reader that survives damage, and
the rules that decide which blocks count.

encode_block, BlockType, header keys   the byte layout of a block (``_format``)
LogWriter, LogWrite                    one attempt's blocks into a log file (``writer``)
scan_log, scan_backward, LogScan,      every valid block and every damaged region (``reader``)
LogBlock, CorruptRegion
select_committed, select_by_sequence,  the statistics rule and HUDI-6758's fallback (``select``)
CommittedBlocks, Selection, SkippedBlock, MissingCommittedBlockError
"""

from lakewarden.logfile._format import (
    ATTEMPT_ID,
    BLOCK_SEQUENCE_NO,
    COMMAND,
    FORMAT_VERSION,
    INSTANT_TIME,
    MAGIC,
    SCHEMA,
    BlockTooLargeError,
    BlockType,
    decode_records,
    encode_block,
    encode_records,
)
from lakewarden.logfile.reader import CorruptRegion, LogBlock, LogScan, scan_backward, scan_log
from lakewarden.logfile.select import (
    CommittedBlocks,
    MissingCommittedBlockError,
    Selection,
    SkippedBlock,
    select_by_sequence,
    select_committed,
)
from lakewarden.logfile.writer import LogWrite, LogWriter

__all__ = [
    "ATTEMPT_ID",
    "BLOCK_SEQUENCE_NO",
    "COMMAND",
    "FORMAT_VERSION",
    "INSTANT_TIME",
    "MAGIC",
    "SCHEMA",
    "BlockTooLargeError",
    "BlockType",
    "CommittedBlocks",
    "CorruptRegion",
    "LogBlock",
    "LogScan",
    "LogWrite",
    "LogWriter",
    "MissingCommittedBlockError",
    "Selection",
    "SkippedBlock",
    "decode_records",
    "encode_block",
    "encode_records",
    "scan_backward",
    "scan_log",
    "select_by_sequence",
    "select_committed",
]
