"""``Storage.list``: key order, string prefixes, exclusive ``start_after``, on every backend.

The fixed cases pick names where a directory walk and key order disagree (``-`` and ``.``
sort before ``/``); the model test checks random key sets against ``sorted``.
"""

from __future__ import annotations

import random

import pytest

from lakewarden.storage import Storage

# -- list --------------------------------------------------------------------------------------

# Names chosen so that a naive directory walk gets the order wrong: '-' and '.' sort before
# '/', '0' after it. No key is a directory of another (local storage cannot hold both).
KEYS = ["a-b", "a.c", "a/b/c", "a/c", "a0", "b", ".hidden", "a/b-x", "a/b/d"]


def _keys(storage: Storage, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [info.key for info in storage.list(prefix, start_after=start_after)]


def _fill(storage: Storage, keys: list[str]) -> None:
    for key in keys:
        storage.write(key, key.encode())


def test_list_empty_storage(storage: Storage) -> None:
    assert _keys(storage) == []
    assert _keys(storage, "no/such/") == []


def test_list_is_in_key_order_across_directories(storage: Storage) -> None:
    keys = ["a-b", "a.c", "a/b", "a/c", "a0", "b", ".hidden", "x/y/z", "x/y-z"]
    _fill(storage, keys)
    assert _keys(storage) == sorted(keys)


def test_list_reports_sizes(storage: Storage) -> None:
    storage.write("sz/one", b"1")
    storage.write("sz/three", b"333")
    assert [(i.key, i.size) for i in storage.list("sz/")] == [("sz/one", 1), ("sz/three", 3)]


@pytest.mark.parametrize(
    "prefix",
    ["", "a", "a/", "a/b", "a/b/", "a-", "a/c", "b", "zz", ".", "a/b/c"],
)
def test_list_prefix_is_a_string_prefix(storage: Storage, prefix: str) -> None:
    _fill(storage, KEYS)
    assert _keys(storage, prefix) == sorted(k for k in KEYS if k.startswith(prefix))


@pytest.mark.parametrize(
    ("prefix", "start_after"),
    [
        ("", "a/b"),  # an existing key: exclusive
        ("", "a/b/"),  # between keys
        ("", "a"),  # a prefix of many keys, not itself a key
        ("", ""),  # before everything
        ("", "zzz"),  # after everything
        ("a/", "a/b/c"),
        ("a/", "0"),  # before the prefix
        ("a/", "b"),  # after the prefix
        ("a/b", "a/b-x"),
    ],
)
def test_list_start_after(storage: Storage, prefix: str, start_after: str) -> None:
    _fill(storage, KEYS)
    expected = sorted(k for k in KEYS if k.startswith(prefix) and k > start_after)
    assert _keys(storage, prefix, start_after) == expected


def test_list_timeline_pattern(storage: Storage) -> None:
    """Sequential zero-padded keys, listed after the last one a reader has seen."""
    for seq in range(12):
        storage.write_if_absent(f"tl/{seq:020d}.json", b"{}")
    storage.write_if_absent("tl/_checkpoints/00000000000000000010.json", b"{}")
    listed = _keys(storage, "tl/", f"tl/{9:020d}.json")
    assert listed == [
        f"tl/{10:020d}.json",
        f"tl/{11:020d}.json",
        "tl/_checkpoints/" + f"{10:020d}.json",
    ]
    assert _keys(storage, "tl/0000000000000000000") == [f"tl/{s:020d}.json" for s in range(10)]


def test_list_reflects_writes_and_deletes_immediately(storage: Storage) -> None:
    storage.write("c/1", b"x")
    assert _keys(storage, "c/") == ["c/1"]
    storage.write_if_absent("c/2", b"x")
    assert _keys(storage, "c/") == ["c/1", "c/2"]
    storage.delete("c/1")
    assert _keys(storage, "c/") == ["c/2"]


def test_list_does_not_report_directories(storage: Storage) -> None:
    storage.write("p/q/r/s", b"x")
    assert _keys(storage, "p") == ["p/q/r/s"]


def _random_keys(rng: random.Random, count: int) -> list[str]:
    """Keys from a tiny alphabet (so names collide and extend each other), none of them a
    directory of another."""
    keys: set[str] = set()
    while len(keys) < count:
        segments = [
            "".join(rng.choice("ab-.0_") for _ in range(rng.randint(1, 3)))
            for _ in range(rng.randint(1, 3))
        ]
        if any(s in (".", "..") for s in segments):
            continue
        key = "/".join(segments)
        if any(k.startswith(key + "/") or key.startswith(k + "/") for k in keys):
            continue
        keys.add(key)
    return sorted(keys)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_list_matches_sorted_model(storage: Storage, seed: int) -> None:
    rng = random.Random(seed)
    keys = _random_keys(rng, 40)
    _fill(storage, keys)
    # Prefixes and start_after values: keys, cut-off keys (partial names), directories.
    cuts = [k[: rng.randint(0, len(k))] for k in rng.sample(keys, 6)]
    directories = sorted({k.rpartition("/")[0] + "/" for k in keys if "/" in k})
    prefixes = ["", "a", *cuts[:3], *rng.sample(directories, 3)]
    starts: list[str | None] = [None, "", *rng.sample(keys, 4), *cuts[3:], *directories[:2]]
    for prefix in prefixes:
        for start_after in starts:
            expected = [
                k for k in keys if k.startswith(prefix) and (start_after is None or k > start_after)
            ]
            assert _keys(storage, prefix, start_after) == expected, (prefix, start_after)
