"""Which rows of a base file hold which keys: the lookup at the heart of a merge-on-read read.

A merge asks, for a few thousand keys (a slice's log winners, its deleted keys), which of the
base file's hundred thousand rows hold them. Two ways to answer, chosen per base file:

- **Binary search** when the base's keys are integers in ascending order without nulls (a file
  written in key order: ingestion of increasing ids or event times, a sorted bulk insert).
  Checking that is one vectorized comparison of neighbours; then each looked-up key costs
  ``log2(rows)`` steps and the base's other rows are never touched.
- **A hash lookup** otherwise (``pyarrow.compute.index_in``): every base key is probed once
  against a hash set of the looked-up keys.

Both give the same pairs; ``tests/unit/table/test_key_match.py`` checks them against each
other and against a plain dictionary.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["KeyIndex", "Rows", "integer_values", "key_order"]

Rows = npt.NDArray[np.int64]


class KeyIndex:
    """The keys of a base file, ready to be looked up (``matches``)."""

    __slots__ = ("_ascending", "_keys", "_unique")

    def __init__(self, keys: pa.Array) -> None:
        self._keys = keys
        self._ascending, self._unique = _ascending_integers(keys)

    @property
    def binary_search(self) -> bool:
        """Whether lookups search the sorted keys (else they hash every base key)."""
        return self._ascending is not None

    def matches(self, keys: pa.Array, *, order: Rows | None = None) -> tuple[Rows, Rows]:
        """Every pair (base row, position in ``keys``) with equal keys, as two arrays of equal
        length, in no particular order. A null key matches a null key (as ``is_in`` does).
        ``keys`` should be unique: with duplicates, only the set of base rows is meaningful
        (a row may pair with one of them or with each). ``order``, when the caller has it,
        is ``key_order(keys)`` (a binary search then does not sort the keys again)."""
        if self._ascending is not None and pa.types.is_integer(keys.type):
            return _search(self._ascending, keys, unique=self._unique, order=order)
        slot = pc.index_in(self._keys, value_set=keys)
        found = slot.is_valid()
        rows = pc.indices_nonzero(found).to_numpy().astype(np.int64)
        return rows, slot.filter(found).to_numpy().astype(np.int64)


def integer_values(keys: pa.Array) -> npt.NDArray[np.int64] | None:
    """Integer keys without nulls as int64 values (no copy for int64), else None. Unsigned
    ones past the signed range wrap: every comparison of wrapped values (order, equality) is
    made on both sides alike, so equality is kept and a wrapped order is still checked."""
    if not pa.types.is_integer(keys.type) or keys.null_count:
        return None
    values: npt.NDArray[np.int64] = keys.to_numpy().astype(np.int64, copy=False)
    return values


def key_order(keys: pa.Array) -> Rows | None:
    """The positions of integer ``keys`` without nulls in ascending order of key (stable),
    for ``KeyIndex.matches``; None for other keys."""
    values = integer_values(keys)
    return None if values is None else np.argsort(values, kind="stable")


def _ascending_integers(keys: pa.Array) -> tuple[npt.NDArray[np.int64] | None, bool]:
    """The keys as int64 values when they are integers in ascending order without nulls, and
    whether they are unique (strictly ascending, the usual case: one comparison pass)."""
    values = integer_values(keys)
    if values is None or len(values) < 2:
        return None, False
    if bool(np.all(values[1:] > values[:-1])):
        return values, True
    if bool(np.all(values[1:] >= values[:-1])):
        return values, False
    return None, False


def _search(
    ascending: npt.NDArray[np.int64], keys: pa.Array, *, unique: bool, order: Rows | None
) -> tuple[Rows, Rows]:
    """``KeyIndex.matches`` by binary search; a null key matches nothing (the base has none).

    The keys are searched in ascending order (numpy then narrows each search by the one
    before, and memory is walked forwards): sorting a few thousand keys costs less than what
    it saves. Each key's run of equal base keys starts at ``left``; it holds one row when the
    base keys are unique, else it ends at ``right``."""
    values = integer_values(keys)
    valid = None
    if values is None:  # nulls among the keys: search the others
        valid = pc.indices_nonzero(keys.is_valid()).to_numpy().astype(np.int64)
        values = pc.take(keys, valid).to_numpy().astype(np.int64, copy=False)
    if order is None or valid is not None:
        order = np.argsort(values, kind="stable")  # a few sorted runs (blocks): near linear
    needles = values[order]
    positions = order if valid is None else valid[order]
    left = np.searchsorted(ascending, needles, side="left")
    if unique:
        hit = left < len(ascending)
        hit[hit] = ascending[left[hit]] == needles[hit]
        return left[hit].astype(np.int64), positions[hit].astype(np.int64)
    counts = np.searchsorted(ascending, needles, side="right") - left
    run_start = np.cumsum(counts) - counts
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(run_start, counts)
    rows = np.repeat(left, counts).astype(np.int64) + offsets
    return rows, np.repeat(positions, counts).astype(np.int64)
