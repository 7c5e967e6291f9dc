"""What only the local backend does or must get right: temporary files, rename, append,
paths, and keys that collide with the directory layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _storage_helpers import race

from lakewarden.storage import (
    AlreadyExistsError,
    InvalidKeyError,
    NotFoundError,
    StorageIOError,
)
from lakewarden.storage.local import LocalStorage


@pytest.fixture
def local(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "root")


def test_uri_and_local_path(local: LocalStorage, tmp_path: Path) -> None:
    assert local.uri == (tmp_path / "root").as_uri()
    local.write("a/b.parquet", b"x")
    path = local.local_path("a/b.parquet")
    assert path == str(tmp_path / "root" / "a" / "b.parquet")
    assert Path(path).read_bytes() == b"x"


def test_no_temporary_files_are_left_or_listed(local: LocalStorage) -> None:
    local.write("d/k", b"1")
    local.write("d/k", b"2")
    local.write_if_absent("d/j", b"3")
    with pytest.raises(AlreadyExistsError):
        local.write_if_absent("d/j", b"4")
    assert sorted(os.listdir(local.root / "d")) == ["j", "k"]
    # A crash mid-write leaves a temporary file: it is never an object.
    (local.root / "d" / ".lw-tmp-0123abcd").write_bytes(b"torn")
    assert [i.key for i in local.list()] == ["d/j", "d/k"]


def test_rename_moves_without_replacing(local: LocalStorage) -> None:
    local.write("_temporary/0/f", b"data")
    local.rename("_temporary/0/f", "p=1/f")  # creates the destination's directories
    assert local.read("p=1/f") == b"data"
    assert not local.exists("_temporary/0/f")
    local.write("src", b"new")
    with pytest.raises(AlreadyExistsError, match="destination exists") as info:
        local.rename("src", "p=1/f")
    assert info.value.key == "p=1/f"
    assert local.read("p=1/f") == b"data" and local.read("src") == b"new"


def test_rename_missing_source(local: LocalStorage) -> None:
    with pytest.raises(NotFoundError, match="cannot rename 'nope'"):
        local.rename("nope", "dst")
    assert not local.exists("dst")


def test_rename_interrupted_after_link_completes_when_repeated(local: LocalStorage) -> None:
    local.write("src", b"data")
    os.link(local.local_path("src") or "", local.root / "dst")  # the crash: linked, not unlinked
    local.rename("src", "dst")
    assert local.read("dst") == b"data"
    assert not local.exists("src")


def test_racing_renames_to_one_destination(local: LocalStorage) -> None:
    for i in range(8):
        local.write(f"attempt{i}", f"{i}".encode())
    winners, errors = race(8, lambda i: local.rename(f"attempt{i}", "final"))
    assert len(winners) == 1
    assert all(isinstance(err, AlreadyExistsError) for err in errors)
    assert local.read("final") == f"{winners[0]}".encode()


def test_append_creates_and_extends(local: LocalStorage) -> None:
    local.append("p/.f1_000.log.1_0-1-0", b"block1")
    local.append("p/.f1_000.log.1_0-1-0", b"block2")
    assert local.read("p/.f1_000.log.1_0-1-0") == b"block1block2"


def test_keys_colliding_with_directories(local: LocalStorage) -> None:
    local.write("a/b", b"x")
    with pytest.raises(InvalidKeyError, match="collides with the directory layout"):
        local.write("a", b"y")
    with pytest.raises(InvalidKeyError, match="collides"):
        local.write_if_absent("a", b"y")
    with pytest.raises(InvalidKeyError, match="collides"):
        local.write("a/b/c", b"y")
    local.write("src", b"z")
    with pytest.raises(InvalidKeyError, match="collides"):
        local.rename("src", "a")
    with pytest.raises(NotFoundError):
        local.read("a")
    with pytest.raises(NotFoundError, match="directory"):
        local.stat("a")
    local.delete("a")  # not an object: nothing to delete
    assert local.read("a/b") == b"x"


def test_unreadable_directory_is_an_io_error(local: LocalStorage) -> None:
    local.write("k", b"x")
    os.symlink("loop", local.root / "loop")  # scandir of it fails with ELOOP, even for root
    with pytest.raises(StorageIOError, match="local list of 'loop/' failed"):
        list(local.list("loop/"))
    assert [i.key for i in local.list()] == ["k"]  # symlinks are not objects


def test_missing_root_lists_nothing(tmp_path: Path) -> None:
    assert list(LocalStorage(tmp_path / "not-yet").list()) == []


def test_a_listing_after_a_key_stats_only_what_it_may_return(
    local: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a timeline: names before ``start_after``'s own name are not ``lstat``-ed
    (the level hint lets them through), except its prefixes and itself, which may be
    directories whose keys sort after it (``t/00012/x`` > ``t/00012.json``)."""
    for seq in range(8, 14):
        local.write(f"t/{seq:05d}.json", b"{}")
    local.write("t/00012/x", b"a directory named like a prefix of the start")
    stated: list[str] = []
    real_lstat = os.lstat

    def lstat(path: str, *args: object, **kwargs: object) -> os.stat_result:
        stated.append(os.path.basename(path))
        return real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", lstat)
    keys = [info.key for info in local.list("t/", start_after="t/00012.json")]
    assert keys == ["t/00012/x", "t/00013.json"]
    assert sorted(stated) == ["00012", "00012.json", "00013.json"]  # not 00010/00011.json


def test_reads_and_listings_name_the_same_files_as_writes(local: LocalStorage) -> None:
    local.write("a/b/c.json", b"1")
    assert local.read("a/b/c.json") == b"1"
    assert [i.key for i in local.list("a/", start_after="a/b/a")] == ["a/b/c.json"]
    with pytest.raises(NotFoundError):
        local.read("a/b")  # a directory is not an object
    with pytest.raises(NotFoundError):
        local.read("a/b/c.json/d")  # below a file
    with pytest.raises(InvalidKeyError):
        local.read("a/../b")
