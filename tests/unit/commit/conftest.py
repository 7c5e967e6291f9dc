"""Fixtures of the committer tests: a fresh table root on each real backend.

``table`` is parametrised: ``local`` (a ``LocalStorage`` in the test's temp dir) and ``s3``
(an ``S3Storage`` under a unique prefix of the session bucket on the session's SeaweedFS; the
``s3`` marker lets ``-m 'not s3'`` run the local half alone). ``Table`` bundles the storage
with what the assertions need: the data files a reader could see, and the pending uploads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _commit_helpers import Table

from lakewarden.settings import Settings
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.s3 import S3Storage


def _cleanup_s3(parent: S3Storage, name: str) -> None:
    for upload in parent.list_multipart_uploads(name + "/"):
        parent.abort_multipart(upload.key, upload.upload_id)
    for info in parent.list(name + "/"):
        parent.delete(info.key)


def _s3_table(request: pytest.FixtureRequest) -> Iterator[Table]:
    settings: Settings = request.getfixturevalue("s3_settings")
    bucket: str = request.getfixturevalue("s3_bucket")
    name = uuid.uuid4().hex
    parent = S3Storage(bucket, "commit", settings.s3)
    yield Table(S3Storage(bucket, f"commit/{name}", settings.s3), parent, name)
    _cleanup_s3(parent, name)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Table]:
    """An empty table root on the backend named by the parameter."""
    if request.param == "local":
        yield Table(LocalStorage(tmp_path / "table"), None, "")
        return
    yield from _s3_table(request)


@pytest.fixture
def s3_table(request: pytest.FixtureRequest) -> Iterator[Table]:
    """An empty table root on S3 only (upload-mode behaviour)."""
    yield from _s3_table(request)


@pytest.fixture
def local_table(tmp_path: Path) -> Table:
    """A local table root (for filesystem-only behaviour: symlinks, directories, SIGKILL)."""
    return Table(LocalStorage(tmp_path / "table"), None, "")
