"""The storage contract every lakewarden component writes through.

A ``Storage`` addresses objects by *key*: a ``/``-separated path relative to the storage root:
not empty, no leading ``/``, no empty, ``.`` or ``..`` segments, no NUL or backslash, and no
segment starting with ``.lw-tmp-`` (reserved for the local backend's temporary files). Any
other key is refused with ``InvalidKeyError`` by every operation, on every backend. Backends
are ``local`` (a directory, ``lakewarden.storage.local``) and ``s3`` (a bucket and prefix,
``lakewarden.storage.s3``); ``open_storage`` picks one from a URI. Guarantees every backend
gives:

1. **Atomic visibility.** ``write`` and ``write_if_absent`` make an object visible whole or not
   at all; a reader never sees a torn object.
2. **Put-if-absent.** ``write_if_absent`` creates the object only if no object has that key and
   raises ``AlreadyExistsError`` otherwise. It is one atomic primitive: ``os.link`` of a
   fully written temporary file on a filesystem, ``PutObject`` with ``If-None-Match: *`` on S3.
   It is never "check, then write". Of N concurrent callers on one key exactly one succeeds.
   It is sent once (no automatic retry), so ``AlreadyExistsError`` always means another
   writer's object; an unknown outcome is ``StorageIOError``, reconciled by reading the key.
3. **Consistent, ordered listing.** After a write or delete returns, ``list`` reflects it.
   ``list`` yields keys in ascending code-point order (= UTF-8 byte order, as S3 defines it),
   including across "directories" (``a-b`` < ``a/b`` < ``a0``), and ``start_after`` is
   exclusive and may be any string. Backends that list otherwise (SeaweedFS) are corrected
   by listing one level at a time (``_walk``).
4. **Named errors.** A missing key raises ``NotFoundError``; an operation the backend cannot do
   (``rename`` or ``append`` on S3) raises ``UnsupportedOperationError``; a fault in the store
   raises ``StorageIOError`` (retryable; the effect may or may not have happened); a request
   the store refuses for good (credentials, missing bucket, malformed) raises
   ``RequestRejectedError``. Callers handle ``AlreadyExistsError`` by rebasing.

5. **Capabilities.** ``Storage.capabilities`` is a frozen ``StorageCapabilities`` saying what
   the backend can do beyond the guarantees above (rename, append, multipart uploads, local
   paths, conditional put, direct file access). Callers choose a strategy by reading it, never
   by testing the backend's type (as Hadoop's ``ManifestStoreOperations`` answers "can this
   store rename"); an operation whose capability is off raises ``UnsupportedOperationError``.
   Wrappers (faults, metering) forward the capabilities of the storage they wrap, except
   ``direct_file_access``, which they clear: their calls must not be bypassed.

6. **Temporary files.** A backend that writes through temporary files (local: ``.lw-tmp-*``
   beside the key, see ``lakewarden.storage.local``) leaves one behind when a write is
   interrupted by a crash. Listings skip them; ``list_temporary`` finds them (the cleaner
   deletes the old ones with ``delete_temporary``). Backends whose writes are atomic puts
   (S3) have none.

Not portable: a key that is also a "directory" of other keys (``a`` beside ``a/b``). S3 holds
both; the local backend refuses the second with ``InvalidKeyError``. Lakewarden's layout never
needs it.

Multipart uploads (S3 only: ``capabilities.multipart_uploads``) let a task attempt upload a
data file to its *final* key while holding back completion; the job commit completes them
(``complete_multipart`` with ``If-None-Match: *``) or aborts them. ``list_multipart_uploads``
requires a prefix ending in ``/`` so one job never sees another job's uploads by a shared
name prefix. On SeaweedFS 4.48
the completion condition is not atomic under concurrency (see ``lakewarden.storage.s3``).

Test harness: ``lakewarden.storage.faults.FaultyStorage`` (injected failures and lost replies);
metrics: ``lakewarden.storage.metered.MeteredStorage``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakewarden.errors import LakewardenError, NonRetryableError, RetryableError

if TYPE_CHECKING:
    from lakewarden.settings import Settings


class StorageError(LakewardenError):
    """Root of storage errors; carries the key it concerns."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class AlreadyExistsError(StorageError, RetryableError):
    """``write_if_absent`` lost: an object with this key exists. Rebase and retry."""


class NotFoundError(StorageError, NonRetryableError):
    """No object has this key."""


class UnsupportedOperationError(StorageError, NonRetryableError):
    """This backend cannot do this operation (rename and append on S3)."""


class InvalidKeyError(StorageError, NonRetryableError):
    """The key is absolute, has ``..`` segments or otherwise escapes the storage root."""


class RequestRejectedError(StorageError, NonRetryableError):
    """The store refused the request for a reason repeating it will not fix: credentials or
    permissions, a missing bucket, a malformed request (an unknown part in a multipart
    completion, say). The message carries the store's error code."""


class StorageIOError(StorageError, RetryableError):
    """The store failed (I/O error, network error, 5xx). The effect may or may not have happened."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageCapabilities:
    """What a storage can do beyond the contract every backend keeps.

    - ``rename``: ``rename`` moves an object atomically without replacing (local files);
    - ``append``: ``append`` extends an object in place (local files; log files rely on it);
    - ``multipart_uploads``: uploads to a final key can be held back, then completed with
      ``If-None-Match: *`` or aborted (S3): how task attempts write privately without rename;
    - ``local_paths``: every object is a file at ``local_path(key)`` (pyarrow reads it
      directly; symlinks there must be checked, no key rule sees them);
    - ``conditional_put``: ``write_if_absent`` is one atomic put-if-absent (every backend);
    - ``direct_file_access``: nothing stands between callers and the files, so a caller may
      use filesystem calls on the local paths in place of the contract's (the job commit's
      fast path: one ``renameat2`` per file, one fsync per directory). Wrappers clear it.
    """

    rename: bool = False
    append: bool = False
    multipart_uploads: bool = False
    local_paths: bool = False
    conditional_put: bool = True
    direct_file_access: bool = False

    @property
    def private_staging(self) -> bool:
        """Whether task attempts can write privately before the job commit: by renaming
        from an attempt directory, or by holding back multipart uploads to the final keys."""
        return self.rename or self.multipart_uploads

    def wrapped(self) -> StorageCapabilities:
        """These capabilities as a wrapper forwards them (no direct file access)."""
        return dataclasses.replace(self, direct_file_access=False)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    mtime_ms: int
    # The store's entity tag, unquoted, where it has one (S3's ETag; None on a filesystem).
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class UploadedPart:
    part_number: int
    etag: str


@dataclass(frozen=True, slots=True)
class PendingUpload:
    key: str
    upload_id: str


class Storage(abc.ABC):
    """Keyed object storage rooted at ``uri``. See the module docstring for the contract.

    Every method may also raise ``InvalidKeyError`` (a key or prefix breaking the key rules,
    checked before any I/O), ``StorageIOError`` (a store fault) and ``RequestRejectedError``
    (the store refused the request for good); only the specific errors are listed below.
    """

    uri: str

    @property
    @abc.abstractmethod
    def capabilities(self) -> StorageCapabilities:
        """What this storage can do (see ``StorageCapabilities``); constant per instance."""

    @abc.abstractmethod
    def read(self, key: str) -> bytes:
        """Return the whole object. Raises: NotFoundError."""

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the object from byte ``offset`` (fewer at its end, none
        from or past it): a Parquet footer without the whole file. Backends read only the
        range (a ranged ``GetObject`` on S3, a seek locally); this default reads the whole
        object. Raises: NotFoundError, ValueError (a negative offset or length)."""
        if offset < 0 or length < 0:
            raise ValueError(f"read_range of {key!r}: offset {offset} and length {length}")
        return self.read(key)[offset : offset + length]

    @abc.abstractmethod
    def write(self, key: str, data: bytes) -> None:
        """Create or replace the object atomically."""

    @abc.abstractmethod
    def write_if_absent(self, key: str, data: bytes) -> None:
        """Create the object atomically only if absent.

        Raises: AlreadyExistsError (an object has the key: rebase), StorageIOError (outcome
        unknown: read the key to learn whether this write landed)."""

    @abc.abstractmethod
    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix`` (a plain string prefix: ``"tl/000"``
        matches ``tl/0001``), in ascending key order, only keys greater than ``start_after``
        when given. Directories are not objects. The prefix is checked when called; store
        errors surface while iterating."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size and modification time. Raises: NotFoundError."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object has this key (for reporting, never to guard a write)."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error (idempotent cleanup)."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` without replacing an existing ``dst``.

        Raises: NotFoundError (no src), AlreadyExistsError (dst exists),
        UnsupportedOperationError (S3)."""

    @abc.abstractmethod
    def append(self, key: str, data: bytes) -> None:
        """Append to the object, creating it if absent. Raises: UnsupportedOperationError (S3)."""

    @abc.abstractmethod
    def local_path(self, key: str) -> str | None:
        """A filesystem path for the key when the backend is local (pyarrow reads it directly),
        else None."""

    def open_location(self, uri: str) -> Storage:
        """Another location (a report directory, say), reached the way this storage is: an
        ``s3://`` URI with this storage's endpoint and credentials when it is itself on S3,
        with the environment's settings otherwise. Raises: ConfigurationError (as
        ``open_storage``)."""
        return open_storage(uri)

    # -- temporary files (local); a backend without them has none ---------------------------

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The temporary files (a ``.lw-tmp-*`` last segment, a name no key has) under the
        directory ``prefix`` (``""`` or ending in ``/``), in no particular order. A write in
        progress has one too: judge by ``mtime_ms`` before deleting.

        Raises: InvalidKeyError (``prefix`` is not a directory prefix)."""
        from lakewarden.storage._keys import check_directory_prefix

        if prefix:
            check_directory_prefix(prefix)
        return iter(())

    def delete_temporary(self, key: str) -> None:
        """Remove a temporary file ``list_temporary`` found; a missing one is not an error.

        Raises: InvalidKeyError (``key`` is not a temporary file's)."""
        check_temporary_key(key)

    # -- multipart uploads (S3); local raises UnsupportedOperationError ------------------------

    def create_multipart(self, key: str) -> str:
        """Start a multipart upload to ``key``; returns its upload id."""
        raise UnsupportedOperationError(f"{type(self).__name__} has no multipart uploads", key=key)

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> UploadedPart:
        """Upload one part (numbers from 1; all but the last at least 5 MiB, on AWS S3 and on
        SeaweedFS alike). Raises: NotFoundError (unknown upload)."""
        raise UnsupportedOperationError(f"{type(self).__name__} has no multipart uploads", key=key)

    def complete_multipart(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> None:
        """Complete the upload with ``If-None-Match: *``; parts may be given in any order.

        Raises: AlreadyExistsError when an object already has the key (a completed upload is
        never silently replaced; the upload stays pending, abort it), NotFoundError (unknown
        upload), RequestRejectedError (a wrong or too small part)."""
        raise UnsupportedOperationError(f"{type(self).__name__} has no multipart uploads", key=key)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Abort the upload; aborting an unknown or finished upload is not an error."""
        raise UnsupportedOperationError(f"{type(self).__name__} has no multipart uploads", key=key)

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """Pending uploads under ``prefix``, which must end in ``/``."""
        raise UnsupportedOperationError(
            f"{type(self).__name__} has no multipart uploads", key=prefix
        )


def is_temporary_key(key: str) -> bool:
    """Whether ``key`` names a temporary file (no valid key does)."""
    from lakewarden.storage._keys import TEMP_PREFIX

    return key.rpartition("/")[2].startswith(TEMP_PREFIX)


def check_temporary_key(key: str) -> str:
    """Return ``key`` if it is a temporary file's: a valid key but for its last segment.

    Raises: InvalidKeyError."""
    from lakewarden.storage._keys import check_key

    directory, _, name = key.rpartition("/")
    if not is_temporary_key(key) or "/" in name:
        raise InvalidKeyError(f"{key!r} is not a temporary file's key", key=key)
    if directory:
        check_key(directory)
    return key


def open_storage(uri: str, settings: Settings | None = None) -> Storage:
    """The backend for ``uri``: a plain path or ``file://`` URI (local), ``s3://bucket/prefix``
    (S3, endpoint and credentials from ``settings.s3`` or the environment).

    Raises: ConfigurationError (unknown scheme, malformed URI)."""
    from lakewarden.storage._uri import open_storage as _open

    return _open(uri, settings)


__all__ = [
    "AlreadyExistsError",
    "InvalidKeyError",
    "NotFoundError",
    "ObjectInfo",
    "PendingUpload",
    "RequestRejectedError",
    "Storage",
    "StorageCapabilities",
    "StorageError",
    "StorageIOError",
    "UnsupportedOperationError",
    "UploadedPart",
    "check_temporary_key",
    "is_temporary_key",
    "open_storage",
]
