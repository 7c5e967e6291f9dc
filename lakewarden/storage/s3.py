"""The S3 backend (boto3), tested against SeaweedFS. The only module that imports boto3.

How each guarantee of the contract is met:

- ``write_if_absent``: ``PutObject`` with ``If-None-Match: *``; ``412 PreconditionFailed`` (or
  ``409 ConditionalRequestConflict``, AWS's answer to a concurrent conditional write) becomes
  ``AlreadyExistsError``. SeaweedFS 4.48 honours it atomically: 150 rounds of 16 racing
  writers on one key gave exactly one winner each.
- ``complete_multipart``: ``CompleteMultipartUpload`` with ``If-None-Match: *``, same mapping.
  **Gap on SeaweedFS 4.48**: the condition is checked, but not atomically with the
  completion. Completing onto an existing key is refused, yet uploads to one key completed
  *concurrently* can all succeed (seen in 10 of 30 rounds of 16 racers, up to all 16), the
  last one winning. On AWS S3 the condition is atomic. Callers that complete uploads must
  therefore not rely on it to arbitrate races on SeaweedFS: only one owner completes a job's
  uploads (the job committer is partitioned by table), and keys carry a write token so two
  attempts never share one.
- Conditional requests are sent by a client **without automatic retries**: a retried
  conditional request whose first attempt landed would come back ``412`` and be reported as
  lost, although it won. Without retries a transport failure surfaces as ``StorageIOError``
  ("outcome unknown"), which callers reconcile by reading. Other requests are idempotent and
  retried by botocore (standard mode, 3 attempts).
- ``list``: SeaweedFS lists directory by directory, not in key order (``a/b`` before
  ``a-b``), and its ``StartAfter`` follows that order; so listings go one level at a time
  (``Delimiter="/"``) and are ordered here (``_walk``), one request per directory entered.
- ``rename`` and ``append`` do not exist on S3 (``UnsupportedOperationError``); tasks upload
  to final keys with multipart uploads instead.

Clients are created lazily on first use (no network in ``__init__``) and shared by threads
(botocore clients are thread-safe; creating them is not, hence the lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import SecretStr

from lakewarden.extras import missing_extra
from lakewarden.settings import S3Settings, Settings
from lakewarden.storage import (
    AlreadyExistsError,
    NotFoundError,
    ObjectInfo,
    PendingUpload,
    RequestRejectedError,
    Storage,
    StorageCapabilities,
    StorageError,
    StorageIOError,
    UnsupportedOperationError,
    UploadedPart,
    open_storage,
)
from lakewarden.storage._keys import check_directory_prefix, check_key, check_prefix
from lakewarden.storage._walk import LevelEntry, ordered_walk

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError as err:
    raise missing_extra("s3", "S3 storage", err) from err

# No rename or append on S3: task attempts hold back multipart uploads to their final keys.
_CAPABILITIES = StorageCapabilities(multipart_uploads=True, conditional_put=True)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload"})
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412"})
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"}
)


def _translate(err: Exception, op: str, key: str, *, conditional: bool = False) -> StorageError:
    """The named storage error for a botocore failure of ``op`` on ``key``."""
    if not isinstance(err, ClientError):  # BotoCoreError: connection, timeout, stream
        return StorageIOError(f"S3 {op} of {key!r} failed: {err}", key=key)
    error: dict[str, Any] = err.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    detail = f"{code or status}: {error.get('Message', '')}".rstrip(": ")
    if conditional and code in _CONFLICT_CODES:
        return AlreadyExistsError(f"object {key!r} already exists ({detail})", key=key)
    if code in _NOT_FOUND_CODES:
        return NotFoundError(f"no object {key!r} ({detail})", key=key)
    if status >= 500 or code in _TRANSIENT_CODES:
        return StorageIOError(f"S3 {op} of {key!r} failed ({detail})", key=key)
    return RequestRejectedError(
        f"S3 refused {op} of {key!r} ({detail}). Help: check the bucket, the endpoint and the "
        "credentials in the LAKEWARDEN_S3__* settings.",
        key=key,
    )


def _reveal(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()


class S3Storage(Storage):
    """Objects under ``prefix`` in ``bucket``; ``settings`` give endpoint and credentials.

    Raises (constructor): InvalidKeyError (a prefix with bad segments). No network here.
    """

    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self._root = self.prefix + "/" if self.prefix else ""
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.settings = settings or S3Settings()
        self._lock = threading.Lock()
        self._clients: dict[bool, Any] = {}

    def __repr__(self) -> str:
        return f"S3Storage({self.uri!r}, endpoint={self.settings.endpoint_url!r})"

    @property
    def capabilities(self) -> StorageCapabilities:
        return _CAPABILITIES

    def _client(self, *, retries: bool = True) -> Any:
        """The boto3 S3 client; ``retries=False`` gives the one for conditional requests."""
        client = self._clients.get(retries)
        if client is not None:
            return client
        with self._lock:
            if retries not in self._clients:
                self._clients[retries] = self._make_client(retries)
            return self._clients[retries]

    def _make_client(self, retries: bool) -> Any:
        s = self.settings
        config = Config(
            retries={"mode": "standard", "max_attempts": 3 if retries else 1},
            # Above the job commit's 32 threads (botocore's default is 10: threads beyond it
            # wait for a connection), with room for racing writers of the same storage.
            max_pool_connections=64,
            connect_timeout=10,
            read_timeout=60,
        )
        session = boto3.session.Session()
        return session.client(
            "s3",
            endpoint_url=s.endpoint_url,
            region_name=s.region,
            # None: boto3's credential chain (environment, ~/.aws, instance role).
            aws_access_key_id=_reveal(s.access_key_id),
            aws_secret_access_key=_reveal(s.secret_access_key),
            config=config,
        )

    def _full(self, key: str) -> str:
        return self._root + check_key(key)

    def _call(self, op: str, key: str, *, conditional: bool = False, **kwargs: Any) -> Any:
        """Run client method ``op`` on this bucket, translating errors for ``key``."""
        client = self._client(retries=not conditional)
        try:
            return getattr(client, op)(Bucket=self.bucket, **kwargs)
        except (ClientError, BotoCoreError) as err:
            raise _translate(err, op, key, conditional=conditional) from err

    # -- objects ------------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        response = self._call("get_object", key, Key=self._full(key))
        try:
            return bytes(response["Body"].read())
        except (ClientError, BotoCoreError) as err:
            raise _translate(err, "get_object", key) from err

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """See ``Storage.read_range``: one ranged ``GetObject``."""
        if offset < 0 or length < 0:
            raise ValueError(f"read_range of {key!r}: offset {offset} and length {length}")
        if length == 0:
            self.stat(key)  # NotFoundError for a missing key, as a read would
            return b""
        byte_range = f"bytes={offset}-{offset + length - 1}"
        try:
            response = self._call("get_object", key, Key=self._full(key), Range=byte_range)
        except RequestRejectedError as err:
            if "InvalidRange" in str(err) or "416" in str(err):
                return b""  # from or past the end: nothing there
            raise
        try:
            return bytes(response["Body"].read())
        except (ClientError, BotoCoreError) as err:
            raise _translate(err, "get_object", key) from err

    def write(self, key: str, data: bytes) -> None:
        self._call("put_object", key, Key=self._full(key), Body=data)

    def write_if_absent(self, key: str, data: bytes) -> None:
        """See ``Storage.write_if_absent``. Sent once, without automatic retries.

        Raises: AlreadyExistsError, StorageIOError (outcome unknown)."""
        self._call(
            "put_object", key, conditional=True, Key=self._full(key), Body=data, IfNoneMatch="*"
        )

    def stat(self, key: str) -> ObjectInfo:
        head = self._call("head_object", key, Key=self._full(key))
        return ObjectInfo(
            key=key,
            size=int(head["ContentLength"]),
            mtime_ms=int(head["LastModified"].timestamp() * 1000),
            etag=str(head["ETag"]).strip('"') if head.get("ETag") else None,
        )

    def exists(self, key: str) -> bool:
        try:
            self.stat(key)
        except NotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        self._call("delete_object", key, Key=self._full(key))

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """See ``Storage.list``. Lazy, one directory level (``Delimiter="/"``) at a time, so
        the order is true key order on stores that list otherwise (see ``_walk``).

        Raises: InvalidKeyError (bad prefix), StorageIOError while iterating."""
        return ordered_walk(self._list_level, check_prefix(prefix), start_after)

    def _list_level(self, base: str, partial: str, hint: str | None) -> Iterator[LevelEntry]:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._root + base + partial,
            "Delimiter": "/",
        }
        if hint is not None:
            kwargs["StartAfter"] = self._root + base + hint
        cut = len(self._root + base)
        paginator = self._client().get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(**kwargs):
                for item in page.get("Contents", ()):
                    mtime_ms = int(item["LastModified"].timestamp() * 1000)
                    etag = item.get("ETag")
                    yield LevelEntry(
                        str(item["Key"])[cut:],
                        False,
                        int(item["Size"]),
                        mtime_ms,
                        str(etag).strip('"') if etag else None,
                    )
                for common in page.get("CommonPrefixes", ()):
                    yield LevelEntry(str(common["Prefix"])[cut:].rstrip("/"), True)
        except (ClientError, BotoCoreError) as err:
            raise _translate(err, "list_objects_v2", base + partial) from err

    def rename(self, src: str, dst: str) -> None:
        raise UnsupportedOperationError(
            f"S3 has no rename (of {src!r} to {dst!r}). Help: upload to the final key with a "
            "multipart upload and complete it at commit.",
            key=src,
        )

    def append(self, key: str, data: bytes) -> None:
        raise UnsupportedOperationError(
            f"S3 objects cannot be appended to ({key!r}). Help: write a new object per block.",
            key=key,
        )

    def local_path(self, key: str) -> str | None:
        check_key(key)
        return None

    def open_location(self, uri: str) -> Storage:
        """``uri`` with this storage's endpoint and credentials (an ``s3://`` one; a path is
        local as everywhere)."""
        return open_storage(uri, Settings(s3=self.settings))

    # -- multipart uploads --------------------------------------------------------------------

    def create_multipart(self, key: str) -> str:
        response = self._call("create_multipart_upload", key, Key=self._full(key))
        return str(response["UploadId"])

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> UploadedPart:
        """See ``Storage.upload_part``. Raises: NotFoundError (unknown upload)."""
        response = self._call(
            "upload_part",
            key,
            Key=self._full(key),
            UploadId=upload_id,
            PartNumber=part_number,
            Body=data,
        )
        return UploadedPart(part_number=part_number, etag=str(response["ETag"]))

    def complete_multipart(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> None:
        """See ``Storage.complete_multipart``. After ``AlreadyExistsError`` the upload is still
        pending: abort it. Not atomic on SeaweedFS (see the module docstring).

        Raises: AlreadyExistsError, NotFoundError (unknown upload), RequestRejectedError (bad
        parts), StorageIOError (outcome unknown)."""
        ordered = sorted(parts, key=lambda part: part.part_number)
        self._call(
            "complete_multipart_upload",
            key,
            conditional=True,
            Key=self._full(key),
            UploadId=upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": p.part_number, "ETag": p.etag} for p in ordered]
            },
            IfNoneMatch="*",
        )

    def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            self._call("abort_multipart_upload", key, Key=self._full(key), UploadId=upload_id)
        except NotFoundError:
            return  # already aborted or completed: aborting is idempotent cleanup

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """See ``Storage.list_multipart_uploads``.

        Raises: InvalidKeyError (prefix not ending in ``/``), StorageIOError while iterating."""
        check_directory_prefix(prefix)
        return self._upload_pages(prefix)

    def _upload_pages(self, prefix: str) -> Iterator[PendingUpload]:
        paginator = self._client().get_paginator("list_multipart_uploads")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._root + prefix):
                for upload in page.get("Uploads", ()):
                    key = str(upload["Key"])[len(self._root) :]
                    yield PendingUpload(key=key, upload_id=str(upload["UploadId"]))
        except (ClientError, BotoCoreError) as err:
            raise _translate(err, "list_multipart_uploads", prefix) from err
