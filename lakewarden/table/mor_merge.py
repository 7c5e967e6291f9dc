"""One vectorized merge of a file slice: its base records and all its committed log blocks.

Replaying a merge-on-read slice's blocks one run at a time would cost a full
``lakewarden.table.merge.merge`` of the whole slice per run (membership tests, a sort, two
concats of every base record). This module computes the same result in one pass, because the
sequential merge is a fold whose outcome per key can be stated directly:

- every record of a key is an *event* at a position: the base record at 0, the records of the
  ``i``-th block at ``i`` (and, within a block, in row order); a delete block at ``d`` removes
  every version of its keys from positions before ``d``;
- the survivors of a key are its versions after its last delete; the winner is the one with
  the largest ordering value (null is the smallest), the latest on a tie, which is what each
  upsert of the fold keeps (that choice is associative, so folding block by block or taking
  it over all survivors at once gives the same record). With no ordering field the latest
  version wins. A key with no survivor is absent.

So: concatenate the data blocks once; drop the log rows and base rows a later delete
removes (one membership test per delete block, over the few log rows, and one over the base
with all deleted keys); reduce the log rows to one winner per key (a sort of the log rows
only, when a key has several); then the base records whose key has no winner pass (the one
pass over the whole base) and only the touched ones are compared with their winner (a hash
lookup). Only the columns asked for
(plus the key and the ordering field) are read and carried, so a projection saves decoding
and copying the rest.

The result equals ``lakewarden.table.mor``'s block-by-block fold; a hypothesis property in
``tests/unit/table/test_mor_merge.py`` checks it against that fold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.logfile import BlockType, LogBlock
from lakewarden.table._key_match import KeyIndex, integer_values, key_order
from lakewarden.table.config import META_FILE_NAME, META_RECORD_KEY, TableConfig
from lakewarden.table.files import split_key

__all__ = [
    "RANGE_ROWS",
    "LogSide",
    "merge_base",
    "merge_columns",
    "merge_key",
    "merge_slice",
    "prepare_logs",
]

_POS = "__lw_block"  # the position of a log row's block
# Base rows per range the merge copies or passes whole (``_without``): small enough that an
# update of recent keys leaves most ranges untouched, large enough that a kernel call per
# range costs nothing next to the copy.
RANGE_ROWS = 16_384


def merge_key(config: TableConfig) -> str:
    """The column a merge matches records on. ``_lw_record_key`` is the text of the record key
    field (``lakewarden.table.bucket.key_strings``); for an integer or string field that text
    is one-to-one with the value, so the merge uses the field itself: it is read anyway, and
    integers hash and sort much faster than their text."""
    field_type = config.pa_schema.field(config.record_key).type
    if pa.types.is_integer(field_type) or pa.types.is_string(field_type):
        return config.record_key
    return META_RECORD_KEY


def merge_columns(
    schema: pa.Schema, wanted: Sequence[str], *, key: str, ordering: str | None
) -> pa.Schema:
    """The columns a merge reads and carries: ``wanted`` (in ``schema``'s order), the merge
    key and the ordering field (a merge cannot decide without them)."""
    needed = set(wanted) | {key} | ({ordering} if ordering is not None else set())
    return pa.schema([f for f in schema if f.name in needed], metadata=schema.metadata)


class LogSide:
    """What a slice's committed blocks contribute to its merge, computed without its base
    file (``prepare_logs``): so it can be made while the base file is still being decoded.

    ``winners`` holds one log row per key (the key's latest surviving version, in
    ``schema``), ``keys`` their keys as one array and ``order`` their positions in key order
    (``_key_match.key_order``: a binary search wants them sorted); ``deleted`` every key a
    delete block removes from the rows before it (so from the whole base file), or None."""

    __slots__ = ("deleted", "keys", "order", "winners")

    def __init__(self, winners: pa.Table, key: str, deleted: pa.Array | None) -> None:
        self.winners = winners
        self.keys = _array(winners, key)
        self.order = key_order(self.keys)
        self.deleted = deleted


def prepare_logs(
    blocks: Sequence[LogBlock], *, schema: pa.Schema, key: str, ordering: str | None
) -> LogSide:
    """The log side of a merge of ``blocks`` (module docstring): the data blocks decoded
    once, the rows a later delete removes dropped, one winner per key.

    Raises: pyarrow.ArrowInvalid (a block whose content does not decode or lacks a column)."""
    logs, deletes = _decode(blocks, schema, key)
    deleted = None
    if deletes:
        logs = _drop_deleted(logs, deletes, key)
        deleted = pa.concat_arrays([keys for _, keys in deletes])
    return LogSide(_latest_per_key(logs, key, ordering), key, deleted)


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[LogBlock],
    *,
    schema: pa.Schema,
    key: str,
    ordering: str | None,
) -> pa.Table:
    """The records of a slice: ``base`` (in ``schema``) merged with the committed ``blocks`` in
    the order they apply (module docstring), matching records on ``key`` (``merge_key``).
    ``schema`` holds the key and the ordering field (``merge_columns``); ``_lw_file_name``,
    when in it, is the name of the log file a log record comes from.

    Raises: pyarrow.ArrowInvalid (a block whose content does not decode or lacks a column)."""
    side = prepare_logs(blocks, schema=schema, key=key, ordering=ordering)
    return merge_base(base, side, schema=schema, key=key, ordering=ordering)


def merge_base(
    base: pa.Table | None, side: LogSide, *, schema: pa.Schema, key: str, ordering: str | None
) -> pa.Table:
    """``base`` (in ``schema``, or None: no base file) merged with its slice's ``side``
    (``prepare_logs`` of the same ``schema``, ``key`` and ``ordering``)."""
    if base is None:
        base = schema.empty_table()
    winners = side.winners
    index = KeyIndex(_array(base, key))
    dropped = np.zeros(len(base), dtype=bool)  # the base rows the merge removes
    if side.deleted is not None:
        deleted_rows, _ = index.matches(side.deleted)
        dropped[deleted_rows] = True
    if len(winners) == 0:
        return _without(base, dropped)
    rows, slots = index.matches(side.keys, order=side.order)
    live = ~dropped[rows]  # a deleted base row meets no winner: the winner is newer
    rows, slots = rows[live], slots[live]
    if ordering is None:  # the latest version always wins
        dropped[rows] = True
        return pa.concat_tables([_without(base, dropped), winners])
    if len(slots) and int(np.bincount(slots).max()) > 1:
        # An insert kept duplicate keys in the base: rank every version (stored ones first:
        # a tie goes to the log record, as an upsert gives it to the input).
        contested = pa.concat_tables([base.take(pa.array(rows)), winners])
        dropped[rows] = True
        return pa.concat_tables(
            [_without(base, dropped), _latest_per_key(contested, key, ordering)]
        )
    # Each touched base row against its key's winner. A tie goes to the log record, as an
    # upsert gives it to the input; null is the smallest.
    stored = pc.take(_array(base, ordering), pa.array(rows))
    rival = pc.take(_array(winners, ordering), pa.array(slots))
    log_wins = pc.or_(pc.is_null(stored), pc.fill_null(pc.greater_equal(rival, stored), False))
    wins = np.asarray(log_wins.to_numpy(zero_copy_only=False), dtype=bool)
    dropped[rows[wins]] = True
    beaten = slots[~wins]  # rare: a block carried an older version than the base's
    if len(beaten):
        kept = np.ones(len(winners), dtype=bool)
        kept[beaten] = False
        winners = _filter(winners, _mask(kept))
    return pa.concat_tables([_without(base, dropped), winners])


def _without(table: pa.Table, dropped: npt.NDArray[np.bool_]) -> pa.Table:
    """``table`` without its ``dropped`` rows, the merge's one copy of the base, made only
    where a row is dropped: the base is cut into ranges of ``RANGE_ROWS`` rows, each run of
    ranges without a dropped row passes as a zero-copy slice, each run of ranges with one is
    filtered. Updates that touch a part of the key space (recent keys, one customer's rows)
    copy only that part; updates spread over every range cost one filter, as before."""
    if not dropped.any():
        return table
    if len(table) <= RANGE_ROWS:
        return _filter(table, _mask(~dropped))
    starts = np.arange(0, len(table), RANGE_ROWS)
    touched = np.add.reduceat(dropped, starts) > 0
    pieces: list[pa.Table] = []
    run_start = 0
    for i in range(1, len(starts) + 1):
        if i < len(starts) and touched[i] == touched[run_start]:
            continue
        begin = int(starts[run_start])
        end = int(starts[i]) if i < len(starts) else len(table)
        piece = table.slice(begin, end - begin)
        if touched[run_start]:
            piece = _filter(piece, _mask(~dropped[begin:end]))
        pieces.append(piece)
        run_start = i
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def _mask(keep: npt.NDArray[np.bool_]) -> pa.BooleanArray:
    """``keep`` as an Arrow mask: its bits packed by numpy (``pa.array`` converts a boolean
    array value by value, about fifteen times slower)."""
    bits = np.packbits(keep, bitorder="little")
    return pa.BooleanArray.from_buffers(pa.bool_(), len(keep), [None, pa.py_buffer(bits)])


def _filter(table: pa.Table, mask: pa.Array) -> pa.Table:
    """``table.filter(mask)``, a column at a time: the same rows for less CPU than
    pyarrow's table filter spends on a base file."""
    columns = [pc.filter(column, mask) for column in table.columns]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _decode(
    blocks: Sequence[LogBlock], schema: pa.Schema, key: str
) -> tuple[pa.Table, list[tuple[int, pa.Array]]]:
    """The data blocks' records as one table, in block then row order (with their block's
    position, ``_POS``, when there are delete blocks), and the delete blocks' keys with their
    position."""
    parts: list[pa.Table] = []
    positions: list[tuple[int, int]] = []  # (block position, rows), per part
    deletes: list[tuple[int, pa.Array]] = []
    names = schema.names
    for position, block in enumerate(blocks, start=1):
        if block.block_type is BlockType.COMMAND:
            continue  # a marker: no records
        records = block.records()
        if block.block_type is BlockType.DELETE:
            # A delete block holds the key text only: parsed back to the key's type.
            keys = records.column(META_RECORD_KEY).combine_chunks()
            deletes.append((position, keys.cast(schema.field(key).type)))
            continue
        if META_FILE_NAME in names:
            name = pa.scalar(split_key(block.path)[1])
            records = records.append_column(META_FILE_NAME, pa.repeat(name, len(records)))
        records = records.select(names)
        if not records.schema.equals(schema):  # a cast costs even when it changes nothing
            records = records.cast(schema)
        parts.append(records)
        positions.append((position, len(records)))
    logs = pa.concat_tables(parts) if parts else schema.empty_table()
    if deletes:  # only a delete asks which block a log row came from
        at = np.repeat(
            np.array([p for p, _ in positions], dtype=np.int32), [n for _, n in positions]
        )
        logs = logs.append_column(_POS, pa.array(at, pa.int32()))
    return logs, deletes


def _drop_deleted(logs: pa.Table, deletes: Sequence[tuple[int, pa.Array]], key: str) -> pa.Table:
    """Without the log rows a delete block that comes after them removes (and without
    ``_POS``)."""
    for position, keys in deletes:
        earlier = pc.less(_array(logs, _POS), pa.scalar(position, pa.int32()))
        deleted = pc.is_in(_array(logs, key), value_set=keys)
        logs = _filter(logs, pc.invert(pc.and_(earlier, deleted)))
    return logs.drop_columns([_POS])


def _array(table: pa.Table, name: str) -> pa.Array:
    """A column as one array: kernels over it return arrays, never chunked arrays (pyarrow
    22's ``indices_nonzero`` crashes on a chunked array of no chunks, an empty table's
    column)."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _latest_per_key(table: pa.Table, key: str, ordering: str | None) -> pa.Table:
    """One row per key: the largest ordering value (null the smallest), then the latest row
    (rows are in the order their versions were written).

    ``sort_indices`` is stable: sorted by key and ascending ordering value, a key's rows keep
    their written order among equal values, so its last row is the winner. Usually every key
    is in the logs once, and nothing needs sorting."""
    if len(table) == 0 or _unique(_array(table, key)):
        return table
    sort_keys = [(key, "ascending")]
    if ordering is not None:
        sort_keys.append((ordering, "ascending"))
    ranked = table.take(pc.sort_indices(table, sort_keys=sort_keys, null_placement="at_start"))
    ordered = ranked.column(key).combine_chunks()
    after = ordered.slice(1)
    before = ordered.slice(0, len(ordered) - 1)
    differs = pc.not_equal(before, after)
    if ordered.null_count:  # null == null is null: a null key next to a key differs from it
        differs = pc.if_else(
            pc.is_null(differs), pc.xor(before.is_null(), after.is_null()), differs
        )
    return _filter(ranked, pa.concat_arrays([differs, pa.array([True])]))


def _unique(keys: pa.Array) -> bool:
    """Whether no key repeats. Integer keys are sorted rather than hashed: log rows are often
    a few runs in key order (one per block, when writes came in key order), which a stable
    sort merges in near-linear time; in random order it costs what hashing costs."""
    values = integer_values(keys)
    if values is None:
        return bool(pc.count_distinct(keys, mode="all").as_py() == len(keys))
    ordered = np.sort(values, kind="stable")
    return not bool(np.any(ordered[1:] == ordered[:-1]))
