"""Pending multipart uploads of task attempts in upload mode (S3), and how abort finds them.

A task attempt uploads each data file as a multipart upload *to its final key* and never
completes it; the job commit does. An upload that nobody completes or aborts is invisible but
billed forever, so every upload is recorded where abort and cleanup can find it:

1. before ``create_multipart``, the attempt writes the **intent record**
   ``tasks/<attemptId>/uploads/<n:06d>.json`` = ``{"key": K}``;
2. after it, the record is rewritten with the upload id; when the file is finished, with the
   ordered part etags and the length (the task commit copies these into the manifest).

Abort and cleanup read the records and abort each recorded upload id. A crash between steps 1
and 2 leaves a key without an id: they then list the pending uploads under the key's
directory (``list_multipart_uploads`` needs a prefix ending in ``/``) and abort those whose key
is exactly K — keys carry the attempt's write token, so no other writer uses K.

Limits: an upload whose intent record could not be written was never created (step 1 comes
first). A key at the table root (an unpartitioned table) has no directory prefix to list: if
its attempt crashed between steps 1 and 2, the upload is found only by a bucket lifecycle
rule (``AbortIncompleteMultipartUpload``), which production buckets should have anyway.
A zombie attempt that starts an upload after the job's cleanup leaves a record nobody reads
again; the same lifecycle rule is the backstop.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from lakewarden.commit._store import CommitStore
from lakewarden.storage import NotFoundError, Storage


class UploadRecord(BaseModel):
    """What a task attempt records about one of its uploads (intent, then id, then parts)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    key: str
    upload_id: str | None = Field(default=None, alias="uploadId")
    etags: tuple[str, ...] = ()
    length: int | None = None

    @property
    def finished(self) -> bool:
        return self.upload_id is not None and bool(self.etags) and self.length is not None

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


_MD5_HEX = re.compile(r"^[0-9a-f]{32}$")
_MULTIPART_ETAG = re.compile(r"^[0-9a-f]{32}-[0-9]+$")


def multipart_etag(part_etags: Sequence[str]) -> str | None:
    """The etag S3 gives the object a multipart upload of these parts completes into: the MD5
    of the parts' binary MD5s, then ``-<part count>``. None when a part's etag is not an MD5
    (SSE-KMS and some stores use other values): the object's etag then proves nothing."""
    digests = [etag.strip('"').lower() for etag in part_etags]
    if not digests or not all(_MD5_HEX.match(d) for d in digests):
        return None
    joined = hashlib.md5(b"".join(bytes.fromhex(d) for d in digests), usedforsecurity=False)
    return f"{joined.hexdigest()}-{len(digests)}"


def comparable_etag(stored: str | None) -> str | None:
    """``stored`` when it has the multipart form ``multipart_etag`` computes, else None (a
    store that tags objects otherwise cannot be checked this way)."""
    if stored is None:
        return None
    etag = stored.strip('"').lower()
    return etag if _MULTIPART_ETAG.match(etag) else None


def object_location(storage: Storage) -> tuple[str, str]:
    """(bucket, key prefix ending in '/' or '') of the S3 storage under any wrappers;
    (uri, '') for a store without buckets."""
    inner: object = storage
    while hasattr(inner, "inner"):
        inner = inner.inner
    bucket, prefix = getattr(inner, "bucket", None), getattr(inner, "prefix", None)
    if isinstance(bucket, str) and isinstance(prefix, str):
        return bucket, prefix + "/" if prefix else ""
    return storage.uri, ""


def read_records(store: CommitStore, prefix: str) -> list[UploadRecord]:
    """Every upload record under ``prefix`` (records deleted meanwhile are skipped)."""
    records = []
    for info in store.list(prefix):
        if "/uploads/" not in info.key or not info.key.endswith(".json"):
            continue
        try:
            records.append(UploadRecord.model_validate_json(store.read(info.key)))
        except NotFoundError:
            continue
    return records


def abort_recorded(store: CommitStore, records: Iterable[UploadRecord]) -> tuple[int, int]:
    """Abort the uploads of ``records``; returns (aborted or swept, keys left unresolved).

    Steps:
    1. abort every recorded upload id (aborting a finished one is a no-op);
    2. for keys recorded without an id, list pending uploads under each key's directory and
       abort the ones on exactly those keys;
    3. count the keys at the table root that step 2 cannot list (see the module limits).
    """
    aborted, unresolved = 0, 0
    without_id: dict[str, set[str]] = defaultdict(set)
    for record in records:
        if record.upload_id is not None:  # 1.
            store.abort_multipart(record.key, record.upload_id)
            aborted += 1
        else:
            without_id[record.key.rpartition("/")[0]].add(record.key)
    for directory, keys in sorted(without_id.items()):
        if not directory:  # 3.
            unresolved += len(keys)
            continue
        for upload in store.list_multipart_uploads(directory + "/"):  # 2.
            if upload.key in keys:
                store.abort_multipart(upload.key, upload.upload_id)
                aborted += 1
    return aborted, unresolved
