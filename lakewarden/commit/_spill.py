"""A private spill file for the file entries of a job commit.

Loading 100 manifests of 10,000 entries each must not hold a million entries in memory, so the
load stage writes each manifest's entries, in chunks of ``batch`` entries, to an anonymous
temporary file and forgets them; later stages read one chunk at a time (a chunk is also their
unit of parallel work). Chunks are pickled tuples: the file is written and read by this
process only and deleted when closed (or when the process dies: it has no name).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from collections.abc import Sequence

from lakewarden.commit.manifest import FileEntry, Row, UploadRef

# (src, dst, size, upload: (bucket, key, upload_id, etags, length) | None)
_Row = tuple[str, str, int, tuple[str, str, str, tuple[str, ...], int] | None]


class EntrySpill:
    """Append-only chunks of entries; ``read(chunk)`` is thread-safe (``os.pread``)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="lakewarden-commit-")
        self._fd = self._file.fileno()
        self._lock = threading.Lock()
        self._end = 0
        self._chunks: list[tuple[int, int, int]] = []  # (offset, length, entry count)

    def add(self, rows: Sequence[Row]) -> int:
        """Spill ``rows`` (source, destination, size, upload) as one chunk; returns its id."""
        data = pickle.dumps(
            [
                (
                    src,
                    dst,
                    size,
                    None if up is None else (up.bucket, up.key, up.upload_id, up.etags, up.length),
                )
                for src, dst, size, up in rows
            ],
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        with self._lock:
            offset = self._end
            self._end += len(data)
            self._chunks.append((offset, len(data), len(rows)))
            chunk = len(self._chunks) - 1
        os.pwrite(self._fd, data, offset)
        return chunk

    def read(self, chunk: int) -> list[FileEntry]:
        """The entries of ``chunk``."""
        offset, length, _ = self._chunks[chunk]
        rows: list[_Row] = pickle.loads(os.pread(self._fd, length, offset))
        return [
            FileEntry(src, dst, size, None, None if up is None else UploadRef(*up))
            for src, dst, size, up in rows
        ]

    def pairs(self, chunk: int) -> list[tuple[str, str, int]]:
        """(source, destination, size) of the entries of ``chunk``, without building entries
        (the rename hot path)."""
        offset, length, _ = self._chunks[chunk]
        rows: list[_Row] = pickle.loads(os.pread(self._fd, length, offset))
        return [(src, dst, size) for src, dst, size, _ in rows]

    def count(self, chunk: int) -> int:
        return self._chunks[chunk][2]

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EntrySpill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
