"""``KeyIndex.matches`` finds the same (base row, key) pairs by binary search over ascending
integer keys as by hashing every base key, and both agree with a dictionary."""

from __future__ import annotations

import pyarrow as pa
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.table._key_match import KeyIndex, key_order

_KEY = st.integers(-3, 8)


def pairs(index: KeyIndex, keys: pa.Array) -> set[tuple[int, int]]:
    rows, positions = index.matches(keys)
    assert len(rows) == len(positions)
    found = list(zip(rows.tolist(), positions.tolist(), strict=True))
    assert len(found) == len(set(found))  # each pair once
    # The keys' order given by the caller (a merge computes it beforehand) changes nothing.
    rows, positions = index.matches(keys, order=key_order(keys))
    assert set(zip(rows.tolist(), positions.tolist(), strict=True)) == set(found)
    return set(found)


def expected(base: list[int | None], keys: list[int | None]) -> set[tuple[int, int]]:
    first = {}
    for position, key in enumerate(keys):
        first.setdefault(key, position)
    return {(row, first[key]) for row, key in enumerate(base) if key in first}


@settings(max_examples=examples(50), deadline=None)
@given(
    base=st.lists(_KEY, max_size=30),
    keys=st.lists(st.one_of(st.none(), _KEY), max_size=10, unique=True),
    key_type=st.sampled_from([pa.int64(), pa.int32(), pa.uint64(), pa.int8()]),
)
def test_binary_search_and_hashing_find_the_same_rows(
    base: list[int], keys: list[int | None], key_type: pa.DataType
) -> None:
    if pa.types.is_unsigned_integer(key_type):  # no negatives: shift into range
        base = [b + 3 for b in base]
        keys = [None if k is None else k + 3 for k in keys]
    wanted = pa.array(keys, key_type)
    ascending = KeyIndex(pa.array(sorted(base), key_type))
    assert ascending.binary_search or len(base) < 2
    assert pairs(ascending, wanted) == expected(sorted(base), keys)
    hashed = KeyIndex(pa.array(sorted(base) + [None], key_type))  # a null: no binary search
    assert not hashed.binary_search
    assert pairs(hashed, wanted) == expected(sorted(base) + [None], keys)
    unsorted = KeyIndex(pa.array(base, key_type))
    assert pairs(unsorted, wanted) == expected(base, keys)


def test_unsigned_keys_past_the_signed_range_are_found() -> None:
    big = [1, 2**63 - 1, 2**63, 2**64 - 1]  # ascending as uint64, not once wrapped to int64
    index = KeyIndex(pa.array(big, pa.uint64()))
    assert pairs(index, pa.array([2**64 - 1, 2**63, 5], pa.uint64())) == {(3, 0), (2, 1)}


def test_string_keys_are_hashed() -> None:
    index = KeyIndex(pa.array(["a", "b", "b", "c"]))
    assert not index.binary_search
    assert pairs(index, pa.array(["b", "z"])) == {(1, 0), (2, 0)}
