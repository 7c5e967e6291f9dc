"""The bucket index: record key -> bucket, and partition values -> Hive-style partition path.

**Hash.** A key's bucket is ``fold(fnv1a64(utf8(key))) mod buckets`` where ``utf8(key)`` is the
key cast to an Arrow string (``pyarrow.compute.cast``: ``123`` for integers, the ISO-like text
for dates and timestamps), ``fnv1a64`` is 64-bit FNV-1a over those bytes and
``fold(h) = h ^ (h >> 32)`` mixes the high bits into the low ones before the modulo. FNV-1a is
fixed by its definition, so a key lands in the same bucket in every process, run and platform
(Python's ``hash()`` is salted per process and must never be used). The hash is computed
vectorised on numpy arrays over the Arrow text buffers: one pass per byte position over the
keys still that long, so the work is proportional to the total key bytes; no Python loop per
record.

**Routing** (``route_lazily``) hashes the keys and sorts the rows' group numbers once; each
file group's rows are gathered when its writer asks for them (``Routed.rows``), so the
gather of the rows runs in the writer's threads beside the Parquet encoding. Given the
writer's threads, routing hashes the keys in chunks on them while it computes the partition
codes: nothing can be encoded before every row is routed (the workload profile names the
groups first), so this part is kept short.

Keys are unique per partition (Hudi's non-global bucket index): the same key in two partitions
is two records.

**Partition paths** are Hive style ``k=v/k2=v2``. Values are the Arrow string cast of the column
value with Hive's unsafe characters (``/``, ``=``, ``%``, ``:``, ``#``, control characters, ...)
escaped as ``%XX``; null and the empty string map to ``__HIVE_DEFAULT_PARTITION__`` as in Hive.

**The file groups of a bucket.** Bucket ``b`` of a partition is one *canonical* file group,
``<b:08d>-0000`` (``lakewarden.table.files.bucket_file_id``), which merges (upsert, delete)
rewrite. Inserts do not use it: without a shuffle several Spark tasks hold rows of one bucket,
a file group gets one new base file per instant, and an insert that rewrote the bucket would
cost as much as the bucket. So each task of an insert (Spark's, ``Table.write``'s single
task, the error table's) writes its rows of bucket ``b`` into an **append group** of its own,
``<b:08d>-<instant>-<task>`` (``append_group``): still named by the bucket, so a key lives in
its bucket's file groups, and unique per instant and task, so inserts never overlap each
other nor a merge (which replaces only the append groups its snapshot had).
``BucketSlices`` finds, in a snapshot, the slices of a bucket in a partition.

A merge of bucket ``b`` reads the canonical group *and* every append group of ``b`` in the
partition, writes the merged records to the canonical group and lists the append groups in
``replaced_file_groups`` (``replaced_by_merge``): the next merge consolidates what appends
spread out. Its workload profile names every one of those groups (``BucketSlices.file_groups``)
and always the canonical group, and its statistics name the canonical group too (a new base
file, or replaced when the bucket became empty): so two merges of one bucket always overlap in
the conflict rules, whichever append groups each of them saw.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from concurrent.futures import Executor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.errors import NonRetryableError
from lakewarden.table.config import META_PARTITION_PATH, META_RECORD_KEY, TableConfig, meta_field
from lakewarden.table.files import bucket_file_id
from lakewarden.table.snapshot import FileSlice, Snapshot
from lakewarden.table.stats import FileGroupId

FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# The canonical group of a bucket and its append groups (uuid4 file ids never match: their
# second segment has 4 characters).
_BUCKET_FILE_ID = re.compile(r"(?P<bucket>\d{8}-)(?:0000|\d{17}-\d{5,})")
_UNSAFE = frozenset("\"#%'*/:=?\\{[]^\x7f") | frozenset(chr(c) for c in range(0x20))


class MalformedPartitionPathError(NonRetryableError):
    """A partition path is not ``k=v/k2=v2`` over the table's partition fields."""


# One directory name: 255 bytes on ext4, xfs, APFS and NTFS; S3 allows 1024 per whole key.
MAX_PARTITION_SEGMENT_BYTES = 255


class PartitionValueTooLongError(NonRetryableError):
    """A partition value makes a directory name longer than filesystems allow (``field``,
    ``length``: the escaped segment's length in bytes)."""

    def __init__(self, field: str, value: str | None, length: int) -> None:
        shown = (value or "")[:40]
        super().__init__(
            f"partition field {field!r} has a value of {len(value or '')} characters "
            f"({shown!r}...) whose directory name {field}=... would be {length} bytes; the "
            f"limit is {MAX_PARTITION_SEGMENT_BYTES}. Help: partition by a shorter value "
            "(a prefix, a hash, a date), and nothing of this write was committed."
        )
        self.field = field
        self.length = length


def fnv1a64_bytes(data: bytes) -> int:
    """Reference 64-bit FNV-1a of ``data`` (scalar; the vectorised form is ``key_hashes``)."""
    h = FNV_OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & _MASK64
    return h


def bucket_of(key: object, buckets: int) -> int:
    """The bucket of one key (for tools and tests; writers use ``key_buckets``)."""
    text = pc.cast(pa.array([key]), pa.large_string())[0].as_py()
    h = fnv1a64_bytes(text.encode("utf-8"))
    return ((h ^ (h >> 32)) & _MASK64) % buckets


def key_strings(keys: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    """The text form of record keys that is hashed and stored in ``_lw_record_key``."""
    arr = pc.cast(keys, pa.large_string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr


def _key_text(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``keys`` as Arrow text, chunk by chunk: strings as they are, other types cast to
    ``string`` (half the work of a ``large_string`` cast: 32-bit offsets), or to
    ``large_string`` when a chunk's text passes 2 GiB."""
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        return keys
    try:
        return pc.cast(keys, pa.string())
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        return pc.cast(keys, pa.large_string())


def _hash_text(arr: pa.Array) -> np.ndarray:
    """FNV-1a 64 of every value of one ``string`` or ``large_string`` array (nulls hash as
    the empty string), as numpy ``uint64``.

    One pass per byte position over the keys still that long, in place on numpy arrays (an
    Arrow kernel per step would allocate a new array for every gather, cast, xor and
    multiply)."""
    n = len(arr)
    if n == 0:
        return np.empty(0, np.uint64)
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets_buf, data_buf = arr.buffers()[1], arr.buffers()[2]
    size = np.dtype(width).itemsize
    offsets = np.frombuffer(offsets_buf, width, n + 1, arr.offset * size).astype(np.int64)
    if data_buf is None or data_buf.size == 0:
        return np.full(n, FNV_OFFSET_BASIS, np.uint64)
    data = np.frombuffer(data_buf, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:  # a null's offsets may span bytes: it hashes as ""
        lengths[arr.is_null().to_numpy(zero_copy_only=False)] = 0
    # Longest keys first, so the keys still being hashed at byte k are always a prefix. Keys
    # are short: a 16-bit sort key lets numpy use its radix sort.
    negated = -lengths
    if int(lengths.max()) < 2**15:
        negated = negated.astype(np.int16)
    order = np.argsort(negated, kind="stable")
    starts = offsets[:-1][order]
    descending = lengths[order]
    negated = negated[order]  # ascending, for searchsorted
    h = np.full(n, FNV_OFFSET_BASIS, np.uint64)
    prime = np.uint64(FNV_PRIME)
    for k in range(int(descending[0])):
        count = int(np.searchsorted(negated, -k, side="left"))  # keys longer than k
        active = h[:count]
        active ^= data[starts[:count] + k]
        active *= prime  # wraps modulo 2**64, as FNV wants
    hashes = np.empty_like(h)
    hashes[order] = h
    return hashes


def _hashes(text: pa.Array | pa.ChunkedArray) -> np.ndarray:
    chunks = text.chunks if isinstance(text, pa.ChunkedArray) else [text]
    if len(chunks) == 1:
        return _hash_text(chunks[0])
    return np.concatenate([np.empty(0, np.uint64), *(_hash_text(c) for c in chunks)])


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> pa.UInt64Array:
    """FNV-1a 64 of the UTF-8 text of every key (nulls hash as the empty string)."""
    return pa.array(_hashes(_key_text(keys)), pa.uint64())


def _buckets_of_hashes(hashes: np.ndarray, buckets: int) -> np.ndarray:
    """``fold(h) mod buckets`` of every hash (``int64``)."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    folded: np.ndarray = hashes ^ (hashes >> np.uint64(32))
    remainder: np.ndarray = (folded % np.uint64(buckets)).astype(np.int64)
    return remainder


def key_buckets(keys: pa.Array | pa.ChunkedArray, buckets: int) -> pa.Int32Array:
    """The bucket of every key, vectorised. See the module docstring for the definition."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    return pa.array(_buckets_of_hashes(key_hashes(keys).to_numpy(), buckets), pa.int32())


def escape_partition_value(value: str | None) -> str:
    """Hive's escaping of one partition value (``%XX`` for unsafe characters)."""
    if value is None or value == "":
        return DEFAULT_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _UNSAFE else c for c in value)


def unescape_partition_value(text: str) -> str | None:
    """Inverse of ``escape_partition_value`` (the default partition reads as None).

    Raises: MalformedPartitionPathError."""
    if text == DEFAULT_PARTITION:
        return None
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "%":
            digits = text[i + 1 : i + 3]
            if len(digits) != 2 or not all(c in "0123456789ABCDEFabcdef" for c in digits):
                raise MalformedPartitionPathError(f"bad escape {text[i : i + 3]!r} in {text!r}")
            out.append(chr(int(digits, 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def render_partition_path(fields: Sequence[str], values: Sequence[str | None]) -> str:
    """``k=v/k2=v2`` for the given field names and (text) values; ``''`` when unpartitioned."""
    return "/".join(
        f"{escape_partition_value(f)}={escape_partition_value(v)}"
        for f, v in zip(fields, values, strict=True)
    )


def parse_partition_path(path: str, fields: Sequence[str]) -> list[str | None]:
    """The text values of ``path`` for ``fields`` (in order).

    Raises: MalformedPartitionPathError."""
    if not fields:
        if path:
            raise MalformedPartitionPathError(f"unpartitioned table has partition path {path!r}")
        return []
    segments = path.split("/")
    if len(segments) != len(fields):
        raise MalformedPartitionPathError(f"{path!r} does not have one segment per {list(fields)}")
    values: list[str | None] = []
    for segment, field in zip(segments, fields, strict=True):
        name, sep, text = segment.partition("=")
        if not sep or unescape_partition_value(name) != field:
            raise MalformedPartitionPathError(f"segment {segment!r} of {path!r} is not {field}=...")
        values.append(unescape_partition_value(text))
    return values


def partition_codes(table: pa.Table, partition_by: Sequence[str]) -> tuple[pa.Array, list[str]]:
    """``(codes, paths)``: the partition path of row ``i`` is ``paths[codes[i]]``.

    Vectorised: each partition column is dictionary-encoded, the per-column indices are combined
    into one code, and only the distinct combinations (few) are rendered in Python."""
    n = table.num_rows
    if not partition_by:
        return pa.repeat(pa.scalar(0, pa.int64()), n), [""]
    combined: pa.Array | None = None
    dictionaries: list[list[str | None]] = []
    for name in partition_by:
        column = table.column(name).combine_chunks()
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        dictionary = pc.cast(encoded.dictionary, pa.string()).to_pylist()
        indices = encoded.indices.cast(pa.int64())
        size = pa.scalar(len(dictionary), pa.int64())
        combined = indices if combined is None else pc.add(pc.multiply(combined, size), indices)
        dictionaries.append(dictionary)
    assert combined is not None
    distinct = pc.dictionary_encode(combined)
    # Distinct values can share a path (null and "" are both the default partition): each
    # path gets one code, or rows of one file group would be routed as two.
    paths: list[str] = []
    code_of_path: dict[str, int] = {}
    path_codes: list[int] = []
    for code in distinct.dictionary.to_pylist():
        values: list[str | None] = []
        for dictionary in reversed(dictionaries):
            code, index = divmod(code, len(dictionary))
            values.append(dictionary[index])
        values.reverse()
        _check_segment_lengths(partition_by, values)
        path = render_partition_path(partition_by, values)
        if path not in code_of_path:
            code_of_path[path] = len(paths)
            paths.append(path)
        path_codes.append(code_of_path[path])
    codes = distinct.indices.cast(pa.int64())
    if len(paths) < len(path_codes):
        codes = pc.take(pa.array(path_codes, pa.int64()), codes)
    return codes, paths


def _check_segment_lengths(fields: Sequence[str], values: Sequence[str | None]) -> None:
    """Raises: PartitionValueTooLongError (checked before anything is written, so the error
    names the value instead of an OS error naming a work-area path)."""
    for field, value in zip(fields, values, strict=True):
        segment = f"{escape_partition_value(field)}={escape_partition_value(value)}"
        length = len(segment.encode())
        if length > MAX_PARTITION_SEGMENT_BYTES:
            raise PartitionValueTooLongError(field, value, length)


class Routed:
    """Input rows split by file group (partition path x bucket) without moving them: the row
    numbers of each group, in input order, and the gather (``rows``) of one group at a time.

    The gather is the expensive half of routing (every column of every row, in a new order);
    done per group it runs in the writer's threads, beside the Parquet encoding of other
    groups (Arrow's ``take`` releases the GIL)."""

    def __init__(
        self,
        data: pa.Table,
        order: pa.Array,
        spans: dict[FileGroupId, tuple[int, int]],
    ) -> None:
        self._data = data
        self._order = order
        self._spans = spans

    @property
    def groups(self) -> list[FileGroupId]:
        """The file groups with rows, in partition then bucket order."""
        return list(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def rows(self, group: FileGroupId) -> pa.Table:
        """The rows of ``group`` in input order, with ``_lw_record_key`` and
        ``_lw_partition_path`` in front. Raises: KeyError (no rows for ``group``)."""
        start, length = self._spans[group]
        rows = self._data.take(self._order.slice(start, length))
        path = pa.repeat(pa.scalar(group.partition_path, pa.string()), length)
        return rows.add_column(1, meta_field(META_PARTITION_PATH), path)


def route_lazily(data: pa.Table, config: TableConfig, pool: Executor | None = None) -> Routed:
    """``data`` split by file group, vectorised: one hash of the keys, one stable sort of
    the rows' group numbers; the rows themselves are gathered per group (``Routed.rows``).

    With ``pool`` the keys are cast and hashed in chunks of ``HASH_CHUNK_ROWS`` on its
    threads (numpy and Arrow release the GIL) while this thread computes the partition codes:
    routing is the part of a write that runs before any file is encoded."""
    keys = data.column(config.record_key)
    if pool is None or len(keys) <= HASH_CHUNK_ROWS:
        codes, paths = partition_codes(data, config.partition_by)
        text, hashes = _keyed(keys)
    else:
        chunks = range(0, len(keys), HASH_CHUNK_ROWS)
        futures = [pool.submit(_keyed, keys.slice(i, HASH_CHUNK_ROWS)) for i in chunks]
        codes, paths = partition_codes(data, config.partition_by)  # meanwhile, here
        keyed = [future.result() for future in futures]
        text = pa.concat_arrays([t for t, _ in keyed])
        hashes = np.concatenate([h for _, h in keyed])
    buckets = _buckets_of_hashes(hashes, config.buckets)
    group_code = codes.to_numpy() * config.buckets + buckets
    # Stable: a group's rows keep their input order (a later duplicate wins an upsert's tie).
    order = pc.sort_indices(pa.array(group_code))
    counts = np.bincount(group_code, minlength=len(paths) * config.buckets)
    spans: dict[FileGroupId, tuple[int, int]] = {}
    start = 0
    for code in np.flatnonzero(counts).tolist():
        partition, bucket = divmod(code, config.buckets)
        group = FileGroupId(partition_path=paths[partition], file_id=bucket_file_id(bucket))
        length = int(counts[code])
        spans[group] = (start, length)
        start += length
    return Routed(data.add_column(0, meta_field(META_RECORD_KEY), text), order, spans)


# Keys cast and hashed per task when routing on a pool: large enough that a task's overhead
# is small, small enough that a 2M-row write keeps every thread busy.
HASH_CHUNK_ROWS = 1 << 18


def _keyed(keys: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The text of ``keys`` as one ``string`` array (``_lw_record_key``) and their FNV-1a
    hashes."""
    text = _key_text(keys)
    hashes = _hashes(text)
    if not pa.types.is_string(text.type):
        text = pc.cast(text, pa.string())
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    return text, hashes


def route(data: pa.Table, config: TableConfig) -> dict[FileGroupId, pa.Table]:
    """Split ``data`` by file group (partition path x bucket), each group's rows in input
    order, with the ``_lw_record_key`` and ``_lw_partition_path`` columns in front."""
    routed = route_lazily(data, config)
    return {group: routed.rows(group) for group in routed.groups}


# -- the file groups of a bucket ------------------------------------------------------------


def bucket_prefix(file_id: str) -> str | None:
    """``"<b:08d>-"`` for a file id of bucket ``b`` (canonical or append group), else None."""
    m = _BUCKET_FILE_ID.fullmatch(file_id)
    return m["bucket"] if m else None


def append_group(canonical: FileGroupId, instant: str, task: int) -> FileGroupId:
    """The append group of ``task`` at ``instant`` beside the canonical group of a bucket.

    Raises: ValueError when ``canonical`` is not a bucket's file group."""
    prefix = bucket_prefix(canonical.file_id)
    if prefix is None:
        raise ValueError(f"{canonical} is not the file group of a bucket")
    return FileGroupId(
        partition_path=canonical.partition_path, file_id=f"{prefix}{instant}-{task:05d}"
    )


class BucketSlices:
    """The slices of a snapshot indexed by bucket: ``of(canonical)`` is every slice of that
    bucket in its partition (indexed once per snapshot, at the first lookup: merges look up
    many buckets, and an insert none, so it does not pay for an index of every file)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    @functools.cached_property
    def _by_bucket(self) -> dict[tuple[str, str], list[FileSlice]]:
        by_bucket: dict[tuple[str, str], list[FileSlice]] = {}
        for group, file_slice in self._snapshot.slices.items():
            prefix = bucket_prefix(group.file_id)
            if prefix is not None:
                key = (group.partition_path, prefix)
                by_bucket.setdefault(key, []).append(file_slice)
        return by_bucket

    def of(self, canonical: FileGroupId) -> list[FileSlice]:
        """The slices of ``canonical``'s bucket in its partition: the canonical one first (if
        the snapshot has it), then the append groups in file id order."""
        prefix = bucket_prefix(canonical.file_id)
        if prefix is None:
            return []
        found = self._by_bucket.get((canonical.partition_path, prefix), [])
        # One partition here: the file id tells the canonical slice (a string comparison,
        # not a model's, for a bucket that holds many append groups).
        own = [s for s in found if s.file_group.file_id == canonical.file_id]
        others = sorted(
            (s for s in found if s.file_group.file_id != canonical.file_id),
            key=lambda s: s.file_group.file_id,
        )
        return own + others

    def file_groups(self, canonical: FileGroupId) -> list[FileGroupId]:
        """What a merge of ``canonical``'s bucket touches (its workload profile): the canonical
        group, whether or not the snapshot has it, then the bucket's append groups."""
        extras = [s.file_group for s in self.of(canonical) if s.file_group != canonical]
        return [canonical, *extras]


def replaced_by_merge(
    canonical: FileGroupId, slices: Sequence[FileSlice], *, emptied: bool
) -> list[FileGroupId]:
    """The file groups a merge of ``canonical``'s bucket that changed it replaces: the append
    groups among ``slices`` (their records are now in the canonical group) and, when the merge
    left the bucket empty, the canonical group itself, named even when ``slices`` has no
    slice of it (then its removal is a no-op) so that the statistics of every merge that
    changed a bucket name its canonical group."""
    extras = [s.file_group for s in slices if s.file_group != canonical]
    return [canonical, *extras] if emptied else extras
