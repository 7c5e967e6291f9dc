"""``open_storage``: which backend a URI names, and clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from lakewarden.errors import ConfigurationError
from lakewarden.settings import S3Settings, Settings
from lakewarden.storage import open_storage
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.s3 import S3Storage


def test_plain_absolute_path(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "t1"))
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path / "t1"


def test_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = open_storage("tables/t1")
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path / "tables" / "t1"


@pytest.mark.parametrize("authority", ["", "localhost"])
def test_file_uri(tmp_path: Path, authority: str) -> None:
    storage = open_storage(f"file://{authority}{tmp_path}/with%20space")
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path / "with space"
    assert open_storage(storage.uri).uri == storage.uri  # the URI round-trips


def test_s3_uri_uses_the_given_settings() -> None:
    s3 = S3Settings(endpoint_url="http://127.0.0.1:1", access_key_id=SecretStr("k"))
    storage = open_storage("s3://bucket/warehouse/t1/", Settings(s3=s3))
    assert isinstance(storage, S3Storage)
    assert (storage.bucket, storage.prefix, storage.uri) == (
        "bucket",
        "warehouse/t1",
        "s3://bucket/warehouse/t1",
    )
    assert storage.settings is s3


def test_s3_uri_without_prefix() -> None:
    storage = open_storage("s3://bucket", Settings())
    assert isinstance(storage, S3Storage)
    assert (storage.prefix, storage.uri) == ("", "s3://bucket")


def test_s3_settings_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEWARDEN_S3__ENDPOINT_URL", "http://127.0.0.1:9999")
    storage = open_storage("s3://bucket/t")
    assert isinstance(storage, S3Storage)
    assert storage.settings.endpoint_url == "http://127.0.0.1:9999"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "empty storage URI"),
        ("hdfs://nn/tables/t1", "unsupported storage URI scheme 'hdfs'"),
        ("gs://bucket/t", "unsupported storage URI scheme 'gs'"),
        ("file://otherhost/tmp/t", "names host 'otherhost'"),
        ("s3:///no-bucket", "has no bucket"),
        ("s3://bucket/a/../b", "invalid prefix"),
        ("s3://bucket/a//b", "invalid prefix"),
    ],
)
def test_bad_uris_are_configuration_errors(uri: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_storage(uri, Settings())
