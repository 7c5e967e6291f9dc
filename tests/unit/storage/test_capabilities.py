"""``Storage.capabilities``: each backend reports what it can do, and does exactly that;
wrappers forward the capabilities of what they wrap, without direct file access."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.storage import Storage, StorageCapabilities, UnsupportedOperationError
from lakewarden.storage.faults import FaultyStorage
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.metered import MeteredStorage
from lakewarden.storage.s3 import S3Storage


def test_each_backend_reports_its_capabilities(storage: Storage) -> None:
    caps = storage.capabilities
    if isinstance(storage, LocalStorage):
        assert caps == StorageCapabilities(
            rename=True,
            append=True,
            local_paths=True,
            conditional_put=True,
            direct_file_access=True,
        )
    else:
        assert isinstance(storage, S3Storage)
        assert caps == StorageCapabilities(multipart_uploads=True, conditional_put=True)
    assert caps.private_staging


def test_capabilities_match_what_the_backend_does(storage: Storage) -> None:
    """A capability that is on works; one that is off raises ``UnsupportedOperationError``."""
    caps = storage.capabilities
    storage.write("a", b"1")

    def works(call: object) -> bool:
        assert callable(call)
        try:
            call()
        except UnsupportedOperationError:
            return False
        return True

    assert works(lambda: storage.rename("a", "b")) is caps.rename
    assert works(lambda: storage.append("c", b"x")) is caps.append
    assert works(lambda: storage.abort_multipart("d", storage.create_multipart("d"))) is (
        caps.multipart_uploads
    )
    assert (storage.local_path("a") is not None) is caps.local_paths


@pytest.mark.parametrize("wrap", [FaultyStorage, MeteredStorage])
def test_wrappers_forward_capabilities_without_direct_access(
    storage: Storage, wrap: type[FaultyStorage] | type[MeteredStorage]
) -> None:
    wrapped = wrap(storage)
    assert wrapped.capabilities == storage.capabilities.wrapped()
    assert not wrapped.capabilities.direct_file_access
    assert wrap(wrapped).capabilities == wrapped.capabilities  # wrappers nest


def test_wrapped_clears_only_direct_access(tmp_path: Path) -> None:
    caps = LocalStorage(tmp_path).capabilities
    wrapped = caps.wrapped()
    assert (wrapped.rename, wrapped.append, wrapped.local_paths, wrapped.multipart_uploads) == (
        True,
        True,
        True,
        False,
    )
    assert wrapped.direct_file_access is False
    with pytest.raises(AttributeError):
        caps.rename = False  # type: ignore[misc]
