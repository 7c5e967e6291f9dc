"""The level-by-level ordered walk and its store hint, without a store."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from lakewarden.storage._walk import LevelEntry, level_hint, ordered_walk


@pytest.mark.parametrize(
    ("base", "start_after", "hint"),
    [
        ("", None, None),
        ("", "a", None),  # 'a' itself may be a directory holding greater keys
        ("", "a-b", None),  # so may 'a': 'a/...' > 'a-b'
        ("", "ab-c", "a"),
        ("", "ab/c", "a"),
        ("tl/", "tl/00000000000000000123.json", "0000000000000000012"),
        ("tl/", "other/x", None),  # start_after outside the level
        ("a/", "a/b/c", None),
    ],
)
def test_level_hint(base: str, start_after: str | None, hint: str | None) -> None:
    assert level_hint(base, start_after) == hint


def test_walk_orders_levels_and_skips_finished_directories() -> None:
    tree = {
        "": [LevelEntry("a", True), LevelEntry("a-b", False, 1), LevelEntry("b", True)],
        "a/": [LevelEntry("x", False, 2)],
        "b/": [LevelEntry("y", False, 3)],
    }
    visited: list[str] = []

    def list_level(base: str, partial: str, hint: str | None) -> Iterable[LevelEntry]:
        visited.append(base)
        return [e for e in tree[base] if hint is None or e.name > hint]

    assert [i.key for i in ordered_walk(list_level, "", None)] == ["a-b", "a/x", "b/y"]
    visited.clear()
    assert [i.key for i in ordered_walk(list_level, "", "a/x")] == ["b/y"]
    assert visited == ["", "a/", "b/"]  # 'a/' may hold keys after 'a/x'
    visited.clear()
    assert [i.key for i in ordered_walk(list_level, "", "a0")] == ["b/y"]
    assert visited == ["", "b/"]  # every key under 'a/' is < 'a0'
