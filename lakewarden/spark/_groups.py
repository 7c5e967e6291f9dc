"""File groups of a bucket: the canonical one and the append groups beside it.

A bucket ``b`` of a partition is one *canonical* file group, ``<b:08d>-0000``
(``lakewarden.table.files.bucket_file_id``), which merges (upsert, delete, insert through the
helper) rewrite. Spark appends cannot use it: without a shuffle several tasks hold rows of one
bucket, and a file group gets one new base file per instant. So each task of an append writes
its rows of bucket ``b`` into an **append group** of its own, ``<b:08d>-<instant>-<task>``:
still named by the bucket (its first 8 characters), so the bucket index keeps its promise that
a key lives in its bucket's file groups, and unique per instant and task, so appends never
overlap each other.

A merge of bucket ``b`` reads the canonical group *and* every append group of ``b`` in the
partition, writes the merged records to the canonical group and lists the append groups in
``replaced_file_groups``: the next merge consolidates what appends spread out.
"""

from __future__ import annotations

from lakewarden.table.snapshot import FileSlice, Snapshot
from lakewarden.table.stats import FileGroupId

_BUCKET_DIGITS = 8


def bucket_prefix(file_id: str) -> str | None:
    """``"<b:08d>-"`` for a bucket file id (canonical or append group), else None."""
    head = file_id[:_BUCKET_DIGITS]
    if len(file_id) > _BUCKET_DIGITS and head.isdigit() and file_id[_BUCKET_DIGITS] == "-":
        return head + "-"
    return None


def append_group(canonical: FileGroupId, instant: str, task: int) -> FileGroupId:
    """The append group of ``task`` at ``instant`` beside the canonical group of a bucket."""
    prefix = bucket_prefix(canonical.file_id)
    assert prefix is not None, f"{canonical} is not a bucket file group"
    return FileGroupId(
        partition_path=canonical.partition_path, file_id=f"{prefix}{instant}-{task:05d}"
    )


class BucketSlices:
    """The slices of a snapshot indexed by (partition path, bucket prefix)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._by_bucket: dict[tuple[str, str], list[FileSlice]] = {}
        for group, file_slice in snapshot.slices.items():
            prefix = bucket_prefix(group.file_id)
            if prefix is not None:
                key = (group.partition_path, prefix)
                self._by_bucket.setdefault(key, []).append(file_slice)

    def of(self, canonical: FileGroupId) -> list[FileSlice]:
        """The slices of ``canonical``'s bucket in its partition: the canonical one first,
        then the append groups in file id order."""
        prefix = bucket_prefix(canonical.file_id)
        if prefix is None:
            return []
        found = self._by_bucket.get((canonical.partition_path, prefix), [])
        own = [s for s in found if s.file_group == canonical]
        others = sorted(
            (s for s in found if s.file_group != canonical), key=lambda s: s.file_group.file_id
        )
        return own + others
