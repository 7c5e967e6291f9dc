"""The bucket index hash and Hive-style partition paths.

The fixed expected values below pin the hash: if any of them changes, every existing table's
keys would move to other buckets (and upserts would duplicate records), so a change here is a
format change, never a refactoring.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakewarden.table.bucket import (
    DEFAULT_PARTITION,
    MalformedPartitionPathError,
    bucket_of,
    escape_partition_value,
    fnv1a64_bytes,
    key_buckets,
    key_hashes,
    parse_partition_path,
    partition_codes,
    render_partition_path,
    unescape_partition_value,
)


def test_fnv1a64_published_vectors() -> None:
    assert fnv1a64_bytes(b"") == 0xCBF29CE484222325
    assert fnv1a64_bytes(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64_bytes(b"foobar") == 0x85944171F73967E8
    assert key_hashes(pa.array(["", "a", "foobar"])).to_pylist() == [
        0xCBF29CE484222325,
        0xAF63DC4C8601EC8C,
        0x85944171F73967E8,
    ]


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
