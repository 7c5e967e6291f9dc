"""The Arrow merge of one file group and of one bucket, shared by the Python writer and the
Spark tasks.

Merge semantics (per bucket: the records of all its slices, keyed by ``_lw_record_key``):

- **upsert**: incoming records replace stored ones with the same key; with an ordering field
  the larger ordering value wins (null is the smallest) and ties go to the incoming record.
  Duplicates within the input are reduced the same way, a later input record winning a tie.
- **insert**: append without deduplication, as Hudi's insert does (no lookup, duplicates are
  the caller's choice; use upsert to replace).
- **delete**: drop stored records whose key is in the input (only the key and partition columns
  are needed). A bucket left empty has its canonical group listed in ``replaced_file_groups``;
  a bucket with nothing to delete is not rewritten (and its append groups stay).

In a merge-on-read table, a base file an upsert or a delete rewrites keeps its rows in
ascending order of an integer record key (``in_key_order``; compaction does the same): a read
of a base in key order finds the rows its log records replace by binary search instead of
hashing every base key (``lakewarden.table._key_match``). The merge itself appends the changed
records after the untouched ones, so without this the first upsert after an insert of
increasing ids would leave every later read of the group on the slower path. Copy-on-write
reads merge nothing and inserts append: neither pays for the sort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.storage import Storage
from lakewarden.table._key_match import KeyIndex, key_order
from lakewarden.table.bucket import replaced_by_merge
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_RECORD_KEY,
    TableConfig,
    cast_table,
    meta_field,
)
from lakewarden.table.reader import read_data_file
from lakewarden.table.snapshot import FileSlice
from lakewarden.table.stats import FileGroupId

_SEQ = "__lw_seq"


@dataclass(frozen=True)
class Merged:
    """The new content of a file group (None: the group became empty) and what changed."""

    table: pa.Table | None
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    changed: bool = True


def stamped(incoming: pa.Table, instant: str, config: TableConfig, operation: str) -> pa.Table:
    """Routed input with ``_lw_commit_time``; in the merge schema unless it is a delete."""
    times = pa.repeat(pa.scalar(instant), len(incoming))
    incoming = incoming.add_column(0, meta_field(META_COMMIT_TIME), times)
    return incoming if operation == "delete" else cast_table(incoming, config.merge_schema)


def stored(existing: pa.Table, config: TableConfig) -> pa.Table:
    """A base file's records in the merge schema."""
    return cast_table(existing.drop_columns([META_FILE_NAME]), config.merge_schema)


def merge(
    operation: str,
    existing: pa.Table | None,
    incoming: pa.Table,
    ordering_field: str | None,
) -> Merged:
    """The merge of one file group. ``existing`` and ``incoming`` carry the meta columns
    (``_lw_file_name`` excluded) and the same user columns (for delete, incoming has only the
    key and partition columns)."""
    if operation == "delete":
        return _merge_delete(existing, incoming)
    if operation == "insert":
        table = incoming if existing is None else pa.concat_tables([existing, incoming])
        return Merged(table, inserts=len(incoming))
    return _merge_upsert(existing, incoming, ordering_field)


def _merge_delete(existing: pa.Table | None, incoming: pa.Table) -> Merged:
    if existing is None:
        return Merged(None, changed=False)
    doomed = pc.is_in(existing.column(META_RECORD_KEY), value_set=incoming.column(META_RECORD_KEY))
    deletes = pc.sum(doomed).as_py() or 0
    if deletes == 0:
        return Merged(existing, changed=False)
    kept = existing.filter(pc.invert(doomed))
    return Merged(kept if len(kept) else None, deletes=deletes)


def _merge_upsert(existing: pa.Table | None, incoming: pa.Table, ordering: str | None) -> Merged:
    incoming_keys = incoming.column(META_RECORD_KEY)
    if existing is None:
        winners = _dedupe(incoming, ordering)
        return Merged(winners, inserts=len(winners))
    touched = pc.is_in(existing.column(META_RECORD_KEY), value_set=incoming_keys)
    untouched = existing.filter(pc.invert(touched))
    # Only records sharing a key with the input need ordering; the rest are carried over.
    stored_touched = existing.filter(touched)
    candidates = pa.concat_tables([stored_touched, incoming])
    winners = _dedupe(candidates, ordering)
    updates = pc.count_distinct(stored_touched.column(META_RECORD_KEY)).as_py()
    inserts = pc.count_distinct(incoming_keys).as_py() - updates
    return Merged(pa.concat_tables([untouched, winners]), inserts=inserts, updates=updates)


def _dedupe(table: pa.Table, ordering: str | None) -> pa.Table:
    """One record per key: the largest ordering value, then the latest row (incoming rows
    follow stored ones, so ties go to the incoming record, then to the later input record)."""
    if len(table) == 0:
        return table
    ones = pa.repeat(pa.scalar(1, pa.int64()), len(table))
    ranked = table.append_column(_SEQ, pc.cumulative_sum(ones))
    sort_keys = [(META_RECORD_KEY, "ascending")]
    if ordering is not None:
        sort_keys.append((ordering, "descending"))
    sort_keys.append((_SEQ, "descending"))
    ranked = ranked.take(pc.sort_indices(ranked, sort_keys=sort_keys, null_placement="at_end"))
    keys = ranked.column(META_RECORD_KEY).combine_chunks()
    first = pa.concat_arrays(
        [pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))]
    )
    return ranked.filter(first).drop_columns([_SEQ])


def _slice_records(storage: Storage, config: TableConfig, file_slice: FileSlice) -> pa.Table:
    """A slice's records: its base file, merged with its log blocks on a merge-on-read table."""
    if not file_slice.log_files:
        if file_slice.base_file is None:
            return config.file_schema.empty_table()
        base = file_slice.base_file
        return read_data_file(storage, config, base.path, base.file_group.partition_path)
    # Imported here: lakewarden.table.mor merges with this module's ``merge``.
    from lakewarden.table.mor import read_slice

    return read_slice(storage, config, file_slice)


@dataclass(frozen=True)
class BucketMerge:
    """The merge of one bucket: the new content of its canonical group and the file groups
    the commit replaces (``lakewarden.table.bucket.replaced_by_merge``)."""

    merged: Merged
    replaced: tuple[FileGroupId, ...] = ()


def merge_bucket(
    storage: Storage,
    config: TableConfig,
    canonical: FileGroupId,
    slices: Sequence[FileSlice],
    incoming: pa.Table,
    *,
    operation: str,
    instant: str,
) -> BucketMerge:
    """``incoming`` (routed to ``canonical``) merged with the records of every slice of its
    bucket (``BucketSlices.of(canonical)``: the canonical group and its append groups). The
    result belongs in the canonical group; the Python writer and the Spark tasks both use it."""
    existing = [stored(_slice_records(storage, config, s), config) for s in slices]
    existing = [t for t in existing if len(t)]
    merged = merge(
        operation,
        pa.concat_tables(existing) if existing else None,
        stamped(incoming, instant, config, operation),
        config.ordering_field,
    )
    if not merged.changed:
        return BucketMerge(merged)
    if merged.table is not None and config.merge_on_read and operation != "insert":
        merged = replace(merged, table=in_key_order(merged.table, config))
    replaced = replaced_by_merge(canonical, slices, emptied=merged.table is None)
    return BucketMerge(merged, tuple(replaced))


def in_key_order(records: pa.Table, config: TableConfig) -> pa.Table:
    """``records`` in ascending order of the record key when it is an integer field without
    nulls (``_key_match.key_order``: stable, equal keys in the order they came), unless a
    ``KeyIndex`` of them searches already; otherwise ``records`` as they are (module
    docstring)."""
    keys = records.column(config.record_key).combine_chunks()
    if KeyIndex(keys).binary_search:
        return records
    order = key_order(keys)
    return records if order is None else records.take(pa.array(order))
