"""Multipart uploads: S3 only (the local backend renames instead and says it cannot)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from _storage_helpers import race

from lakewarden.storage import (
    AlreadyExistsError,
    InvalidKeyError,
    NotFoundError,
    RequestRejectedError,
    Storage,
    UnsupportedOperationError,
    UploadedPart,
)
from lakewarden.storage.local import LocalStorage

F = TypeVar("F", bound=Callable[..., None])


def s3_only(test: F) -> F:
    """Run ``test`` with the S3 ``storage`` only (and mark it ``s3``)."""
    marked: F = pytest.mark.s3(pytest.mark.parametrize("storage", ["s3"], indirect=True)(test))
    return marked


MIB = 1024 * 1024


def test_local_storage_has_no_multipart(tmp_path: Path) -> None:
    local = LocalStorage(tmp_path)
    calls: list[Callable[[], object]] = [
        lambda: local.create_multipart("k"),
        lambda: local.upload_part("k", "id", 1, b"x"),
        lambda: local.complete_multipart("k", "id", []),
        lambda: local.abort_multipart("k", "id"),
        lambda: local.list_multipart_uploads("p/"),
    ]
    for call in calls:
        with pytest.raises(UnsupportedOperationError, match="LocalStorage has no multipart"):
            call()


Upload = tuple[str, list[UploadedPart]]


def _upload(storage: Storage, key: str, *chunks: bytes) -> Upload:
    upload_id = storage.create_multipart(key)
    parts = [storage.upload_part(key, upload_id, n, c) for n, c in enumerate(chunks, start=1)]
    return upload_id, parts


@s3_only
def test_pending_upload_is_invisible_until_completed(storage: Storage) -> None:
    upload_id, parts = _upload(storage, "data/p=1/f.parquet", b"A" * (5 * MIB), b"tail")
    assert not storage.exists("data/p=1/f.parquet")
    assert list(storage.list("data/")) == []
    with pytest.raises(NotFoundError):
        storage.read("data/p=1/f.parquet")
    assert [u.key for u in storage.list_multipart_uploads("data/")] == ["data/p=1/f.parquet"]

    storage.complete_multipart("data/p=1/f.parquet", upload_id, list(reversed(parts)))

    assert storage.read("data/p=1/f.parquet") == b"A" * (5 * MIB) + b"tail"
    assert [i.key for i in storage.list("data/")] == ["data/p=1/f.parquet"]
    assert list(storage.list_multipart_uploads("data/")) == []


@s3_only
def test_complete_onto_existing_key_is_refused(storage: Storage) -> None:
    storage.write("d/k", b"committed")
    upload_id, parts = _upload(storage, "d/k", b"late")
    with pytest.raises(AlreadyExistsError, match="'d/k' already exists") as info:
        storage.complete_multipart("d/k", upload_id, parts)
    assert info.value.key == "d/k"
    assert storage.read("d/k") == b"committed"
    # A refused completion leaves the upload pending: the caller aborts it.
    assert [u.upload_id for u in storage.list_multipart_uploads("d/")] == [upload_id]
    storage.abort_multipart("d/k", upload_id)
    assert list(storage.list_multipart_uploads("d/")) == []


@s3_only
def test_second_completion_of_one_key_is_refused(storage: Storage) -> None:
    first, first_parts = _upload(storage, "k", b"first")
    second, second_parts = _upload(storage, "k", b"second")
    storage.complete_multipart("k", first, first_parts)
    with pytest.raises(AlreadyExistsError):
        storage.complete_multipart("k", second, second_parts)
    assert storage.read("k") == b"first"


@s3_only
def test_abort_leaves_nothing(storage: Storage) -> None:
    upload_id, _ = _upload(storage, "job/1/f", b"x")
    storage.abort_multipart("job/1/f", upload_id)
    assert list(storage.list_multipart_uploads("job/")) == []
    assert list(storage.list("job/")) == []
    assert not storage.exists("job/1/f")
    storage.abort_multipart("job/1/f", upload_id)  # idempotent
    storage.abort_multipart("job/1/f", "no-such-upload")


@s3_only
def test_upload_part_to_unknown_upload_is_not_found(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match="NoSuchUpload"):
        storage.upload_part("k", "no-such-upload", 1, b"x")


@s3_only
def test_complete_with_a_wrong_part_is_rejected(storage: Storage) -> None:
    upload_id, _ = _upload(storage, "k", b"x")
    with pytest.raises(RequestRejectedError, match="InvalidPart"):
        storage.complete_multipart("k", upload_id, [UploadedPart(1, '"0000"')])
    assert not storage.exists("k")


@s3_only
def test_list_multipart_uploads_is_scoped_by_directory(storage: Storage) -> None:
    one, _ = _upload(storage, "_temporary/job1/a", b"x")
    _upload(storage, "_temporary/job10/b", b"x")
    listed = list(storage.list_multipart_uploads("_temporary/job1/"))
    assert [(u.key, u.upload_id) for u in listed] == [("_temporary/job1/a", one)]
    assert len(list(storage.list_multipart_uploads("_temporary/"))) == 2


@pytest.mark.parametrize("prefix", ["_temporary/job1", "", "/abs/", "a/../b/"])
@s3_only
def test_list_multipart_uploads_requires_a_directory_prefix(storage: Storage, prefix: str) -> None:
    with pytest.raises(InvalidKeyError, match="invalid prefix"):
        storage.list_multipart_uploads(prefix)


@s3_only
def test_multipart_refuses_invalid_keys(storage: Storage) -> None:
    with pytest.raises(InvalidKeyError):
        storage.create_multipart("../escape")


@s3_only
@pytest.mark.xfail(
    reason="SeaweedFS 4.48 checks If-None-Match on CompleteMultipartUpload, but not atomically: "
    "racing completions of one key can all succeed (documented in lakewarden/storage/s3.py)",
    strict=False,
)
def test_racing_completions_have_exactly_one_winner(storage: Storage) -> None:
    for round_ in range(10):
        key = f"race/{round_}"
        uploads = [_upload(storage, key, f"w{i}".encode()) for i in range(16)]

        def complete(i: int, key: str = key, uploads: list[Upload] = uploads) -> None:
            storage.complete_multipart(key, uploads[i][0], uploads[i][1])

        winners, errors = race(16, complete)
        assert all(isinstance(err, AlreadyExistsError) for err in errors), errors
        assert len(winners) == 1, f"round {round_}: winners {winners}"
