"""Package attributes imported on first use (PEP 562), for packages whose ``__init__``
re-exports a public surface from heavy sibling modules.

A Spark task worker is a fresh Python process that imports the few modules a task runs; when
a package ``__init__`` imported its whole surface eagerly, importing one small module of it
(``lakewarden.table.config``) paid for every sibling (the cleaner, the reader with
``pyarrow.dataset`` and pandas, the table services): about 0.6 CPU s per fresh worker.

    _EXPORTS = {"Table": "lakewarden.api.table", ...}
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

with the same names imported under ``if TYPE_CHECKING:`` for type checkers and IDEs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps each public
    name to the module that defines it; the first access imports it and caches it in the
    package's namespace (later accesses do not come back here).

    Raises (from ``__getattr__``): AttributeError for a name ``exports`` lacks."""

    def get(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return get, names


__all__ = ["lazy_exports"]
