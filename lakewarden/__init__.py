"""lakewarden: the commit-coordination plane for data-lake tables written by Apache Spark.

Public entry points: ``lakewarden.Table`` (create, open, write, read, changes, timeline),
``lakewarden.read(uri, as_of=None, columns=None, filter=None)`` and
``lakewarden.connect(settings)`` (the coordinator a table works with, built from settings;
see ``lakewarden.api.connection``). They come from ``lakewarden.api``, the layer
above the packages a table drives, and are imported lazily so that ``import lakewarden.errors``
(services, the CLI) does not pay for pyarrow.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakewarden.api.connection import Connection, connect
    from lakewarden.api.table import Table, read
    from lakewarden.table.writer import CommitResult

try:
    __version__ = metadata.version("lakewarden")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

_EXPORTS: dict[str, str] = {
    "CommitResult": "lakewarden.table.writer",
    "Connection": "lakewarden.api.connection",
    "connect": "lakewarden.api.connection",
    "Table": "lakewarden.api.table",
    "read": "lakewarden.api.table",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lakewarden' has no attribute {name!r}")


__all__ = ["CommitResult", "Connection", "Table", "__version__", "connect", "read"]
