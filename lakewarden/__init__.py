"""lakewarden: the commit-coordination plane for data-lake tables written by Apache Spark.

Public entry points: ``lakewarden.Table`` (create, open, write, read, changes, timeline) and
``lakewarden.read(uri, as_of=None, columns=None, filter=None)``. They are imported lazily so
that ``import lakewarden.errors`` (services, the CLI) does not pay for pyarrow.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakewarden.table.table import Table, read
    from lakewarden.table.writer import CommitResult

try:
    __version__ = metadata.version("lakewarden")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

_LAZY = {
    "Table": "lakewarden.table.table",
    "read": "lakewarden.table.table",
    "CommitResult": "lakewarden.table.writer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lakewarden' has no attribute {name!r}")


__all__ = ["CommitResult", "Table", "__version__", "read"]
