"""The storage contract (``lakewarden.storage`` docstring), against every backend alike."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import pytest
from _storage_helpers import race

from lakewarden.errors import NonRetryableError, RetryableError
from lakewarden.storage import (
    AlreadyExistsError,
    InvalidKeyError,
    NotFoundError,
    Storage,
    StorageError,
)

# -- read / write / write_if_absent -------------------------------------------------------------


def test_read_missing_key_is_not_found(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match=r"no object 'a/missing'") as info:
        storage.read("a/missing")
    assert info.value.key == "a/missing"
    assert isinstance(info.value, NonRetryableError)


def test_write_then_read_round_trips_bytes(storage: Storage) -> None:
    data = bytes(range(256)) * 3
    storage.write("dir/sub/obj.bin", data)
    assert storage.read("dir/sub/obj.bin") == data


def test_write_replaces_existing_object(storage: Storage) -> None:
    storage.write("k", b"first")
    storage.write("k", b"second, longer")
    assert storage.read("k") == b"second, longer"


def test_empty_object(storage: Storage) -> None:
    storage.write_if_absent("empty", b"")
    assert storage.read("empty") == b""
    assert storage.stat("empty").size == 0


def test_object_larger_than_a_chunk(storage: Storage) -> None:
    data = bytes(range(251)) * (6 * 1024 * 1024 // 251)  # > SeaweedFS's 4 MiB chunk size
    storage.write("big", data)
    assert storage.read("big") == data


def test_read_range_reads_only_the_range_and_stops_at_the_end(storage: Storage) -> None:
    data = bytes(range(256)) * 40
    storage.write("ranged", data)
    assert storage.read_range("ranged", 0, 10) == data[:10]
    assert storage.read_range("ranged", 1000, 300) == data[1000:1300]
    assert storage.read_range("ranged", len(data) - 8, 100) == data[-8:]  # fewer at the end
    assert storage.read_range("ranged", len(data), 5) == b""  # none from the end
    assert storage.read_range("ranged", len(data) + 10, 5) == b""
    assert storage.read_range("ranged", 3, 0) == b""
    with pytest.raises(NotFoundError):
        storage.read_range("missing", 0, 10)
    with pytest.raises(ValueError, match="offset"):
        storage.read_range("ranged", -1, 10)


def test_write_if_absent_creates_once(storage: Storage) -> None:
    storage.write_if_absent("timeline/00000000000000000001.json", b'{"seq":1}')
    with pytest.raises(AlreadyExistsError, match="already exists") as info:
        storage.write_if_absent("timeline/00000000000000000001.json", b'{"seq":"other"}')
    assert info.value.key == "timeline/00000000000000000001.json"
    assert isinstance(info.value, RetryableError)  # the caller rebases and retries
    assert storage.read("timeline/00000000000000000001.json") == b'{"seq":1}'


def test_write_if_absent_refuses_over_a_plain_write(storage: Storage) -> None:
    storage.write("k", b"plain")
    with pytest.raises(AlreadyExistsError):
        storage.write_if_absent("k", b"conditional")
    assert storage.read("k") == b"plain"


def test_write_if_absent_after_delete_succeeds(storage: Storage) -> None:
    storage.write_if_absent("k", b"1")
    storage.delete("k")
    storage.write_if_absent("k", b"2")
    assert storage.read("k") == b"2"


@pytest.mark.parametrize("round_", range(3))
def test_racing_write_if_absent_has_exactly_one_winner(storage: Storage, round_: int) -> None:
    key = f"race/{round_:020d}.json"
    winners, errors = race(16, lambda i: storage.write_if_absent(key, f"writer {i}".encode()))
    assert len(winners) == 1, f"winners: {winners}"
    assert len(errors) == 15
    assert all(isinstance(err, AlreadyExistsError) for err in errors), errors
    assert storage.read(key) == f"writer {winners[0]}".encode()


# -- stat / exists / delete -----------------------------------------------------------------------


def test_stat_reports_size_and_recent_mtime(storage: Storage) -> None:
    before_ms = int(time.time() * 1000)
    storage.write("s/obj", b"12345")
    info = storage.stat("s/obj")
    assert (info.key, info.size) == ("s/obj", 5)
    # S3 keeps whole seconds; allow that and a little clock skew.
    assert before_ms - 2_000 <= info.mtime_ms <= int(time.time() * 1000) + 2_000


def test_stat_reports_the_etag_where_the_store_has_one(storage: Storage) -> None:
    """S3 tags an object put whole with the MD5 of its bytes (output validation compares
    etags); a filesystem has none."""
    storage.write("s/tagged", b"12345")
    etag = storage.stat("s/tagged").etag
    if storage.capabilities.multipart_uploads:
        assert etag == hashlib.md5(b"12345", usedforsecurity=False).hexdigest()
    else:
        assert etag is None


def test_a_listing_reports_the_etag_stat_does(storage: Storage) -> None:
    """A job commit checks announced manifests against one listing: it must carry the etag
    (S3's MD5 of an object put whole), as ``stat`` does."""
    storage.write("l/tagged", b"12345")
    [listed] = storage.list("l/")
    assert listed.etag == storage.stat("l/tagged").etag


def test_stat_missing_is_not_found(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match="'nope'"):
        storage.stat("nope")


def test_exists(storage: Storage) -> None:
    assert not storage.exists("e/k")
    storage.write("e/k", b"x")
    assert storage.exists("e/k")
    assert not storage.exists("e")  # a prefix of keys is not an object


def test_delete_removes_and_is_idempotent(storage: Storage) -> None:
    storage.write("d/k", b"x")
    storage.delete("d/k")
    storage.delete("d/k")
    storage.delete("never/there")
    assert not storage.exists("d/k")
    with pytest.raises(NotFoundError):
        storage.read("d/k")
    assert list(storage.list("d/")) == []


def _keys(storage: Storage) -> list[str]:
    return [info.key for info in storage.list()]


# -- keys ----------------------------------------------------------------------------------------

INVALID_KEYS = [
    "",
    "/abs",
    "/",
    "a/../b",
    "..",
    "../x",
    "a//b",
    "a/",
    "./a",
    "a/.",
    "a\\b",
    "a\x00b",
    "a/\ud800",  # a lone surrogate has no UTF-8 bytes (found by hypothesis)
    ".lw-tmp-123",
    "a/.lw-tmp-x/b",
]
KEY_OPERATIONS: dict[str, Callable[[Storage, str], object]] = {
    "read": lambda s, k: s.read(k),
    "write": lambda s, k: s.write(k, b"x"),
    "write_if_absent": lambda s, k: s.write_if_absent(k, b"x"),
    "stat": lambda s, k: s.stat(k),
    "exists": lambda s, k: s.exists(k),
    "delete": lambda s, k: s.delete(k),
    "local_path": lambda s, k: s.local_path(k),
}


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_invalid_keys_are_refused(storage: Storage, key: str) -> None:
    for operation, call in KEY_OPERATIONS.items():
        with pytest.raises(InvalidKeyError, match="invalid key") as info:
            call(storage, key)
        assert info.value.key == key, operation
    assert _keys(storage) == []  # nothing was written anywhere


@pytest.mark.parametrize("prefix", ["/abs", "../x", "a/../b", "a//b", "a\x00"])
def test_invalid_list_prefix_is_refused(storage: Storage, prefix: str) -> None:
    with pytest.raises(InvalidKeyError, match="invalid prefix"):
        storage.list(prefix)


@pytest.mark.parametrize("key", [".hidden", "a/.log.1_2", "a b/c", "ü/ñ.json", "a..b", "_x/.y"])
def test_unusual_but_valid_keys_work(storage: Storage, key: str) -> None:
    storage.write_if_absent(key, key.encode())
    assert storage.read(key) == key.encode()
    assert _keys(storage) == [key]


def test_storage_errors_share_one_root(storage: Storage) -> None:
    with pytest.raises(StorageError):
        storage.read("missing")
    with pytest.raises(StorageError):
        storage.read("/abs")
