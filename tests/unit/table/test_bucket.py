"""The bucket index hash, Hive-style partition paths, and the file groups of a bucket.

The fixed expected values below pin the hash: if any of them changes, every existing table's
keys would move to other buckets (and upserts would duplicate records), so a change here is a
format change, never a refactoring.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakewarden.table import bucket
from lakewarden.table.bucket import (
    DEFAULT_PARTITION,
    BucketSlices,
    MalformedPartitionPathError,
    append_group,
    bucket_of,
    bucket_prefix,
    escape_partition_value,
    fnv1a64_bytes,
    key_buckets,
    key_hashes,
    parse_partition_path,
    partition_codes,
    render_partition_path,
    replaced_by_merge,
    route,
    route_lazily,
    unescape_partition_value,
)
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
    TableConfig,
    meta_field,
)
from lakewarden.table.files import bucket_file_id
from lakewarden.table.merge import stamped
from lakewarden.table.snapshot import FileSlice, Snapshot
from lakewarden.table.stats import FileGroupId, WriteStat
from lakewarden.table.write_input import validate_input


def test_fnv1a64_published_vectors() -> None:
    assert fnv1a64_bytes(b"") == 0xCBF29CE484222325
    assert fnv1a64_bytes(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64_bytes(b"foobar") == 0x85944171F73967E8
    assert key_hashes(pa.array(["", "a", "foobar"])).to_pylist() == [
        0xCBF29CE484222325,
        0xAF63DC4C8601EC8C,
        0x85944171F73967E8,
    ]


def test_key_hashes_of_a_sliced_chunked_array_match_the_reference() -> None:
    # A slice starts its offsets part-way into the buffer; chunks are hashed one by one.
    keys = pa.chunked_array([["x", "é漢字", None], ["foobar", "", "a" * 40]]).slice(1)
    expected = [fnv1a64_bytes((k or "").encode()) for k in keys.to_pylist()]
    assert key_hashes(keys).to_pylist() == expected


def test_fixed_buckets_for_known_keys() -> None:
    strings = pa.array(["order-1", "order-2", "customer-42", "é漢字", ""])
    assert key_buckets(strings, 16).to_pylist() == [2, 11, 14, 2, 1]
    assert key_buckets(strings, 1024).to_pylist() == [242, 715, 494, 114, 961]
    assert key_buckets(pa.array([0, 1, 2, 3, 1000000007]), 8).to_pylist() == [3, 0, 1, 6, 6]
    assert key_buckets(strings, 1).to_pylist() == [0] * 5


def test_buckets_are_stable_across_processes() -> None:
    # Python's str hash is salted per process; ours must not be.
    code = (
        "import pyarrow as pa; from lakewarden.table.bucket import key_buckets;"
        "print(key_buckets(pa.array(['order-1', 'customer-42']), 16).to_pylist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert out.stdout.strip() == "[2, 14]"


@given(st.lists(st.text(max_size=40), max_size=200), st.integers(1, 97))
def test_vectorised_hash_equals_the_scalar_reference(keys: list[str], buckets: int) -> None:
    arr = pa.array(keys, pa.string())
    assert key_hashes(arr).to_pylist() == [fnv1a64_bytes(k.encode()) for k in keys]
    assert key_buckets(arr, buckets).to_pylist() == [bucket_of(k, buckets) for k in keys]


def test_sliced_and_chunked_inputs_hash_like_their_values() -> None:
    keys = [f"k{i}" * (i % 7) for i in range(100)]
    expected = key_hashes(pa.array(keys)).to_pylist()
    assert key_hashes(pa.array(keys).slice(10, 30)).to_pylist() == expected[10:40]
    chunked = pa.chunked_array([pa.array(keys[:50]), pa.array(keys[50:])])
    assert key_hashes(chunked).to_pylist() == expected


def test_buckets_spread_keys() -> None:
    counts = pa.array([f"key-{i}" for i in range(20_000)])
    buckets = key_buckets(counts, 8).value_counts().field("counts").to_pylist()
    assert len(buckets) == 8
    assert min(buckets) > 2_000


def test_bad_bucket_count() -> None:
    with pytest.raises(ValueError, match="buckets must be >= 1"):
        key_buckets(pa.array(["a"]), 0)


@given(st.one_of(st.none(), st.text(max_size=20)))
def test_partition_values_round_trip(value: str | None) -> None:
    escaped = escape_partition_value(value)
    assert "/" not in escaped and "=" not in escaped
    assert unescape_partition_value(escaped) == (value or None)


def test_partition_path_rendering_and_escaping() -> None:
    assert render_partition_path([], []) == ""
    assert render_partition_path(["region", "day"], ["eu", "2024-01-02"]) == (
        "region=eu/day=2024-01-02"
    )
    assert render_partition_path(["p"], ["a/b=c%d:e"]) == "p=a%2Fb%3Dc%25d%3Ae"
    assert render_partition_path(["p"], [None]) == f"p={DEFAULT_PARTITION}"
    assert parse_partition_path("p=a%2Fb%3Dc%25d%3Ae", ["p"]) == ["a/b=c%d:e"]
    assert parse_partition_path(f"a=1/b={DEFAULT_PARTITION}", ["a", "b"]) == ["1", None]


@pytest.mark.parametrize(
    ("path", "fields", "message"),
    [
        ("a=1", ["a", "b"], "does not have one segment per"),
        ("b=1", ["a"], "is not a=..."),
        ("a1", ["a"], "is not a=..."),
        ("a=%zz", ["a"], "bad escape '%zz'"),
        ("a=1", [], "unpartitioned table has partition path"),
    ],
)
def test_malformed_partition_paths(path: str, fields: list[str], message: str) -> None:
    with pytest.raises(MalformedPartitionPathError, match=message):
        parse_partition_path(path, fields)


def test_partition_codes_vectorised() -> None:
    table = pa.table({"a": ["x", "y", None, "x", "y"], "b": [1, 2, 1, 1, 3]})
    codes, paths = partition_codes(table, ["a", "b"])
    rendered = [paths[c] for c in codes.to_pylist()]
    assert rendered == [
        "a=x/b=1",
        "a=y/b=2",
        f"a={DEFAULT_PARTITION}/b=1",
        "a=x/b=1",
        "a=y/b=3",
    ]
    codes, paths = partition_codes(table, [])
    assert paths == [""] and codes.to_pylist() == [0] * 5


def test_null_and_empty_partition_values_share_one_code_and_lose_no_row() -> None:
    # Both are the default partition: two codes for one path made route() keep one of the two
    # slices of a file group and silently drop the other's rows.
    part = pa.array(["eu", "", None, "", None, "eu"], pa.string())
    codes, paths = partition_codes(pa.table({"part": part}), ["part"])
    assert paths == ["part=eu", f"part={DEFAULT_PARTITION}"]
    assert codes.to_pylist() == [0, 1, 1, 1, 1, 0]
    config = TableConfig.new(
        name="t",
        record_key="id",
        schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("part", pa.string())]),
        partition_by=["part"],
        buckets=1,
    )
    groups = route(pa.table({"id": pa.array(range(6), pa.int64()), "part": part}), config)
    assert sorted(g.partition_path for g in groups) == [f"part={DEFAULT_PARTITION}", "part=eu"]
    assert sum(t.num_rows for t in groups.values()) == 6


def test_keys_hash_alike_as_string_large_string_and_their_source_type() -> None:
    ints = pa.chunked_array([pa.array([0, 1, 2], pa.int64()), pa.array([3, 1000000007])])
    text = [str(i) for i in ints.to_pylist()]
    expected = [fnv1a64_bytes(t.encode()) for t in text]
    assert key_hashes(ints).to_pylist() == expected
    assert key_hashes(pa.array(text, pa.string())).to_pylist() == expected
    assert key_hashes(pa.array(text, pa.large_string())).to_pylist() == expected


def test_a_null_key_hashes_as_the_empty_string_whatever_its_offsets_span() -> None:
    # Arrow lets a null slot's offsets span bytes; they are not the key's text.
    valid = pa.array(["ab", "cd", "ef"], pa.string())
    _, offsets, data = valid.buffers()
    validity = pa.array([True, False, True]).buffers()[1]
    keys = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
    assert key_hashes(keys).to_pylist() == [
        fnv1a64_bytes(b"ab"),
        fnv1a64_bytes(b""),
        fnv1a64_bytes(b"ef"),
    ]


def test_routed_groups_gather_their_rows_in_input_order_with_the_meta_columns() -> None:
    config = TableConfig.new(
        name="t",
        record_key="id",
        schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("r", pa.string())]),
        partition_by=["r"],
        buckets=4,
    )
    ids = [7, 3, 7, 11, 2, 3, 40, 7]  # duplicates: their input order decides upserts' ties
    regions = ["a", "b", "a", "a", None, "b", "b", "a"]
    data = pa.chunked_array([ids[:3], ids[3:]]), pa.chunked_array([regions[:5], regions[5:]])
    table = pa.table({"id": data[0], "r": data[1]})
    routed = route_lazily(table, config)
    seen = []
    for group in routed.groups:
        rows = routed.rows(group)
        assert rows.column_names == [META_RECORD_KEY, META_PARTITION_PATH, "id", "r"]
        assert set(rows.column(META_PARTITION_PATH).to_pylist()) == {group.partition_path}
        assert rows.column(META_RECORD_KEY).to_pylist() == [str(i) for i in rows["id"].to_pylist()]
        for key in rows["id"].to_pylist():
            assert group.file_id == bucket_file_id(bucket_of(key, 4))
        positions = [
            i
            for i, (k, r) in enumerate(zip(ids, regions, strict=True))
            if k in rows["id"].to_pylist()
            and render_partition_path(["r"], [r]) == group.partition_path
        ]
        assert rows["id"].to_pylist() == [ids[i] for i in positions]
        seen.extend(positions)
    assert sorted(seen) == list(range(len(ids)))
    assert {g: t.to_pylist() for g, t in route(table, config).items()} == {
        g: routed.rows(g).to_pylist() for g in routed.groups
    }


def test_routed_rows_stamped_are_in_the_merge_schema_without_a_cast() -> None:
    # A write conforms each file's rows to the file schema; rows already in it skip the cast
    # (a cast call per column per file, which a small write of many files feels).
    config = TableConfig.new(
        name="t",
        record_key="id",
        schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("r", pa.string())]),
        partition_by=["r"],
        buckets=2,
    )
    data = validate_input(pa.table({"id": [1, 2, 3], "r": ["a", "b", "a"]}), config, "insert")
    routed = route_lazily(data, config)
    for group in routed.groups:
        rows = routed.rows(group)
        times = pa.repeat(pa.scalar("20260101000000000"), len(rows))
        with_time = rows.add_column(0, meta_field(META_COMMIT_TIME), times)
        assert with_time.schema.equals(config.merge_schema, check_metadata=True)
        assert stamped(rows, "20260101000000000", config, "insert").equals(with_time)


@pytest.mark.parametrize(
    "keys",
    [
        [7, -3, 0, 2**63 - 1, -(2**63), 11, 7, 123456789, -1, 40, 5],
        ["a", "é", "", "longer-key", "a", "ß-x", "zz", "0", "k9", "b", "c"],
    ],
)
def test_routing_on_a_pool_hashes_in_chunks_to_what_routing_alone_gives(
    keys: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pool the keys are cast and hashed in chunks on its threads: the groups, their
    rows and their order are the same as without one (chunks of 3 keys cut the input in
    the middle of an input chunk too)."""
    key_type = pa.int64() if isinstance(keys[0], int) else pa.string()
    config = TableConfig.new(
        name="t",
        record_key="k",
        schema=pa.schema([pa.field("k", key_type, nullable=False), ("r", pa.string())]),
        partition_by=["r"],
        buckets=4,
    )
    regions = [["a", "b", None][i % 3] for i in range(len(keys))]
    column = pa.chunked_array([pa.array(keys[:5], key_type), pa.array(keys[5:], key_type)])
    table = pa.table({"k": column, "r": regions})
    alone = route_lazily(table, config)
    monkeypatch.setattr(bucket, "HASH_CHUNK_ROWS", 3)
    with ThreadPoolExecutor(2) as pool:
        pooled = route_lazily(table, config, pool)
    assert pooled.groups == alone.groups
    for group in alone.groups:
        assert pooled.rows(group).to_pylist() == alone.rows(group).to_pylist()
        for key in pooled.rows(group).column(META_RECORD_KEY).to_pylist():
            assert group.file_id == bucket_file_id(bucket_of(key, 4))


# -- the file groups of a bucket ------------------------------------------------------------

CANONICAL = FileGroupId(partition_path="r=1", file_id=bucket_file_id(3))
INSTANT = "20240101000000000"


def _piece(group: FileGroupId) -> FileSlice:
    stat = WriteStat(file_group=group, path="p", base_instant="1", num_records=1, size_bytes=1)
    return FileSlice(group, "1", stat)


def test_append_groups_keep_their_bucket_prefix() -> None:
    appended = append_group(CANONICAL, INSTANT, 7)
    assert appended == FileGroupId(partition_path="r=1", file_id=f"00000003-{INSTANT}-00007")
    assert append_group(CANONICAL, INSTANT, 123456).file_id.endswith("-123456")
    assert bucket_prefix(appended.file_id) == bucket_prefix(CANONICAL.file_id) == "00000003-"
    assert append_group(appended, "20250101000000000", 1).file_id.startswith("00000003-2025")


@pytest.mark.parametrize(
    "file_id",
    [
        "0c1e-uuid",
        "00000003-0001",  # not the canonical suffix
        "00000003-",
        "0000003-0000",  # 7 digits
        f"00000003-{INSTANT}",  # no task
        "12345678-1234-4234-8234-123456789012",  # a uuid4 whose first segment is all digits
    ],
)
def test_file_ids_of_no_bucket(file_id: str) -> None:
    assert bucket_prefix(file_id) is None
    with pytest.raises(ValueError, match="not the file group of a bucket"):
        append_group(FileGroupId(partition_path="", file_id=file_id), INSTANT, 0)


def test_uuid_file_ids_are_never_bucket_file_ids() -> None:
    assert all(bucket_prefix(str(uuid.uuid4())) is None for _ in range(200))


def test_bucket_slices_of_a_bucket_in_its_partition() -> None:
    appended = [append_group(CANONICAL, INSTANT, t) for t in (2, 0)]
    other_bucket = FileGroupId(partition_path="r=1", file_id=bucket_file_id(4))
    other_partition = FileGroupId(partition_path="r=2", file_id=bucket_file_id(3))
    no_bucket = FileGroupId(partition_path="r=1", file_id=str(uuid.uuid4()))
    groups = [*appended, other_bucket, CANONICAL, other_partition, no_bucket]
    index = BucketSlices(Snapshot("1", {g: _piece(g) for g in groups}))
    in_order = [CANONICAL, appended[1], appended[0]]  # canonical first, then by file id
    assert [s.file_group for s in index.of(CANONICAL)] == in_order
    assert index.file_groups(CANONICAL) == in_order
    assert [s.file_group for s in index.of(other_partition)] == [other_partition]
    assert index.of(no_bucket) == [] and index.file_groups(no_bucket) == [no_bucket]
    # A bucket with append groups only: its canonical group is still what merges touch.
    only_appends = BucketSlices(Snapshot("1", {g: _piece(g) for g in appended}))
    assert [s.file_group for s in only_appends.of(CANONICAL)] == in_order[1:]
    assert only_appends.file_groups(CANONICAL) == in_order
    assert BucketSlices(Snapshot(None)).file_groups(CANONICAL) == [CANONICAL]


def test_a_merge_replaces_the_append_groups_and_names_the_canonical_group_when_emptied() -> None:
    extras = [append_group(CANONICAL, INSTANT, t) for t in (0, 1)]
    slices = [_piece(g) for g in (CANONICAL, *extras)]
    assert replaced_by_merge(CANONICAL, slices, emptied=False) == extras
    assert replaced_by_merge(CANONICAL, slices, emptied=True) == [CANONICAL, *extras]
    # emptied with no canonical slice: still named, so every merge of the bucket overlaps
    assert replaced_by_merge(CANONICAL, slices[1:], emptied=True) == [CANONICAL, *extras]
    assert replaced_by_merge(CANONICAL, slices[:1], emptied=False) == []
