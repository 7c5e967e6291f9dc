"""A ``Storage`` that forwards every call to another through one hook, for wrappers that
observe or disturb calls (faults, metrics) without re-implementing the contract."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, TypeVar

from lakewarden.storage import (
    ObjectInfo,
    PendingUpload,
    Storage,
    StorageCapabilities,
    UploadedPart,
)

Operation = Literal[
    "read",
    "read_range",
    "write",
    "write_if_absent",
    "list",
    "stat",
    "exists",
    "delete",
    "rename",
    "append",
    "local_path",
    "create_multipart",
    "upload_part",
    "complete_multipart",
    "abort_multipart",
    "list_multipart_uploads",
    "list_temporary",
    "delete_temporary",
]
OPERATIONS: tuple[Operation, ...] = (
    "read",
    "read_range",
    "write",
    "write_if_absent",
    "list",
    "stat",
    "exists",
    "delete",
    "rename",
    "append",
    "local_path",
    "create_multipart",
    "upload_part",
    "complete_multipart",
    "abort_multipart",
    "list_multipart_uploads",
    "list_temporary",
    "delete_temporary",
)

T = TypeVar("T")


class ForwardingStorage(Storage):
    """Forwards to ``inner``; every call goes through ``_invoke``.

    Capabilities are the wrapped storage's (``StorageCapabilities.wrapped``).
    Listings are materialised inside ``_invoke`` (so a wrapper sees the whole listing as one
    call, its faults and timings included) and returned as an iterator over that list.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.uri = inner.uri

    @property
    def capabilities(self) -> StorageCapabilities:
        """The wrapped storage's, without direct file access: calls must come through here."""
        return self.inner.capabilities.wrapped()

    def open_location(self, uri: str) -> Storage:
        """The wrapped storage's (a wrapper's metering and faults are for this location)."""
        return self.inner.open_location(uri)

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        """Run ``call`` (the forwarded operation ``op`` on ``key``); subclasses wrap it."""
        return call()

    def read(self, key: str) -> bytes:
        return self._invoke("read", key, lambda: self.inner.read(key))

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        return self._invoke("read_range", key, lambda: self.inner.read_range(key, offset, length))

    def write(self, key: str, data: bytes) -> None:
        self._invoke("write", key, lambda: self.inner.write(key, data))

    def write_if_absent(self, key: str, data: bytes) -> None:
        self._invoke("write_if_absent", key, lambda: self.inner.write_if_absent(key, data))

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        def listing() -> builtins.list[ObjectInfo]:
            return builtins.list(self.inner.list(prefix, start_after=start_after))

        return iter(self._invoke("list", prefix, listing))

    def stat(self, key: str) -> ObjectInfo:
        return self._invoke("stat", key, lambda: self.inner.stat(key))

    def exists(self, key: str) -> bool:
        return self._invoke("exists", key, lambda: self.inner.exists(key))

    def delete(self, key: str) -> None:
        self._invoke("delete", key, lambda: self.inner.delete(key))

    def rename(self, src: str, dst: str) -> None:
        self._invoke("rename", src, lambda: self.inner.rename(src, dst))

    def append(self, key: str, data: bytes) -> None:
        self._invoke("append", key, lambda: self.inner.append(key, data))

    def local_path(self, key: str) -> str | None:
        return self._invoke("local_path", key, lambda: self.inner.local_path(key))

    def create_multipart(self, key: str) -> str:
        return self._invoke("create_multipart", key, lambda: self.inner.create_multipart(key))

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> UploadedPart:
        return self._invoke(
            "upload_part",
            key,
            lambda: self.inner.upload_part(key, upload_id, part_number, data),
        )

    def complete_multipart(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> None:
        self._invoke(
            "complete_multipart",
            key,
            lambda: self.inner.complete_multipart(key, upload_id, parts),
        )

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self._invoke("abort_multipart", key, lambda: self.inner.abort_multipart(key, upload_id))

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        def listing() -> builtins.list[PendingUpload]:
            return builtins.list(self.inner.list_multipart_uploads(prefix))

        return iter(self._invoke("list_multipart_uploads", prefix, listing))

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectInfo]:
        def listing() -> builtins.list[ObjectInfo]:
            return builtins.list(self.inner.list_temporary(prefix))

        return iter(self._invoke("list_temporary", prefix, listing))

    def delete_temporary(self, key: str) -> None:
        self._invoke("delete_temporary", key, lambda: self.inner.delete_temporary(key))
