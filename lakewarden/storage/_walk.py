"""Listing in true key order, one directory level at a time, for every backend.

Why not just ask the store: SeaweedFS (4.48) lists a flat ``ListObjectsV2`` directory by
directory, and its ``StartAfter`` follows that order, so ``a/b`` comes before ``a-b`` although
``-`` sorts before ``/``, and a listing after ``a-b`` skips everything under ``a/``. A
filesystem has no order at all. So each backend only supplies one directory level (its files
and subdirectories), and this module sorts levels and walks them lazily:

- Siblings sorted by ``name`` for objects and ``name + "/"`` for directories are in global key
  order, because every key under directory ``d`` starts with ``d/``.
- A directory whose keys are all ``<= start_after`` is not entered.
- The store may be given a *hint*: a level-relative name such that every sibling still needed
  has a greater name. Results are filtered again here, so a store that returns more is fine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from lakewarden.storage import ObjectInfo


class LevelEntry(NamedTuple):
    """One child of a directory level: an object (with size, mtime and the store's etag, if
    any) or a subdirectory."""

    name: str
    is_dir: bool
    size: int = 0
    mtime_ms: int = 0
    etag: str | None = None


# (base, name_prefix, hint) -> the entries of level ``base`` whose names start with
# ``name_prefix``; a store may skip names ``<= hint`` (when it is not None).
LevelLister = Callable[[str, str, str | None], Iterable[LevelEntry]]


def ordered_walk(
    list_level: LevelLister, prefix: str, start_after: str | None
) -> Iterator[ObjectInfo]:
    """Objects whose key starts with ``prefix`` and is greater than ``start_after`` (when
    given), in ascending key order. ``prefix`` must be validated by the caller."""
    directory, _, partial = prefix.rpartition("/")
    base = directory + "/" if directory else ""
    return _walk_level(list_level, base, partial, start_after)


def _all_at_or_before(start_after: str | None, base: str) -> bool:
    """Whether every key starting with ``base`` is ``<= start_after``."""
    return start_after is not None and start_after > base and not start_after.startswith(base)


def _walk_level(
    list_level: LevelLister, base: str, partial: str, start_after: str | None
) -> Iterator[ObjectInfo]:
    if _all_at_or_before(start_after, base):
        return
    entries = [
        entry
        for entry in list_level(base, partial, level_hint(base, start_after))
        if entry.name and entry.name.startswith(partial)
    ]
    entries.sort(key=lambda e: e.name + "/" if e.is_dir else e.name)
    for entry in entries:
        key = base + entry.name
        if entry.is_dir:
            yield from _walk_level(list_level, key + "/", "", start_after)
        elif start_after is None or key > start_after:
            yield ObjectInfo(key=key, size=entry.size, mtime_ms=entry.mtime_ms, etag=entry.etag)


def level_hint(base: str, start_after: str | None) -> str | None:
    """A name ``x`` such that every child of level ``base`` that may hold keys greater than
    ``start_after`` has a name greater than ``x``; None when there is no such bound.

    The children still needed that sort lowest are ``start_after``'s own segment ``seg`` at
    this level and its prefixes ``seg[:j]`` followed in ``seg`` by a character below ``/``
    (``a`` is needed after ``a-b``: ``a/...`` > ``a-b``). The shortest is ``seg[:j]``; the
    hint is ``seg[:j - 1]``, a proper prefix and therefore smaller.
    """
    if start_after is None or not start_after.startswith(base):
        return None
    segment = start_after[len(base) :].split("/", 1)[0]
    shortest = next(
        (j for j in range(1, len(segment)) if segment[j] < "/"),
        len(segment),
    )
    hint = segment[: shortest - 1]
    return hint or None
