"""Turning a table URI into a ``Storage``: plain paths and ``file://`` are local, ``s3://`` is S3.

boto3 is imported only when an ``s3://`` URI is opened, so local use never pays for it.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from lakewarden.errors import ConfigurationError
from lakewarden.settings import Settings
from lakewarden.storage import InvalidKeyError, Storage
from lakewarden.storage._keys import check_key
from lakewarden.storage.local import LocalStorage


def open_storage(uri: str, settings: Settings | None = None) -> Storage:
    """The backend for ``uri``.

    - ``/abs/path``, ``rel/path`` or ``file:///abs/path`` (host empty or ``localhost``):
      ``LocalStorage``;
    - ``s3://bucket`` or ``s3://bucket/prefix``: ``S3Storage`` with the endpoint and
      credentials of ``settings.s3`` (``Settings()`` from the environment when None).

    Raises:
        ConfigurationError: empty URI, unknown scheme, a ``file://`` URI naming another host,
            an S3 URI without bucket or with an invalid prefix.
    """
    if not uri:
        raise ConfigurationError("empty storage URI. Help: give a path or s3://bucket/prefix.")
    parts = urlsplit(uri)
    if parts.scheme == "":
        return LocalStorage(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"file URI {uri!r} names host {parts.netloc!r}; only local paths are supported. "
                "Help: use file:///absolute/path."
            )
        return LocalStorage(unquote(parts.path))
    if parts.scheme == "s3":
        return _open_s3(uri, parts.netloc, parts.path, settings or Settings())
    raise ConfigurationError(
        f"unsupported storage URI scheme {parts.scheme!r} in {uri!r}. "
        "Help: use a path, file:///path or s3://bucket/prefix."
    )


def _open_s3(uri: str, bucket: str, path: str, settings: Settings) -> Storage:
    from lakewarden.storage.s3 import S3Storage

    if not bucket:
        raise ConfigurationError(f"S3 URI {uri!r} has no bucket. Help: s3://bucket/prefix.")
    prefix = path.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except InvalidKeyError as err:
            raise ConfigurationError(f"S3 URI {uri!r} has an invalid prefix: {err}") from err
    return S3Storage(bucket, prefix, settings.s3)
