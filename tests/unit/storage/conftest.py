"""The ``storage`` fixture: every contract test runs against each real backend.

``local`` is a ``LocalStorage`` in the test's temp dir; ``s3`` is an ``S3Storage`` under a
unique prefix of the session bucket on the session's SeaweedFS (``s3_settings`` and
``s3_bucket`` from ``tests/conftest.py``, started only when an S3 test runs). The S3 variant
carries the ``s3`` marker, so ``-m 'not s3'`` runs the local half alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakewarden.settings import Settings
from lakewarden.storage import Storage
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.s3 import S3Storage


def _cleanup_s3(parent: S3Storage, name: str) -> None:
    """Remove what a test left under ``name/`` (so the shared bucket stays small)."""
    for upload in parent.list_multipart_uploads(name + "/"):
        parent.abort_multipart(upload.key, upload.upload_id)
    for info in parent.list(name + "/"):
        parent.delete(info.key)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A fresh, empty storage root on the backend named by the parameter."""
    if request.param == "local":
        yield LocalStorage(tmp_path / "root")
        return
    settings: Settings = request.getfixturevalue("s3_settings")
    bucket: str = request.getfixturevalue("s3_bucket")
    name = uuid.uuid4().hex
    yield S3Storage(bucket, f"contract/{name}", settings.s3)
    _cleanup_s3(S3Storage(bucket, "contract", settings.s3), name)
