"""Where a table's failed records go: local ``<table root><suffix>`` or one global table."""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.settings import ErrorTableSettings

GLOBAL_NAME = "lakewarden_errors"


@dataclass(frozen=True, slots=True)
class ErrorTableLocation:
    """An error table's root and name."""

    uri: str
    name: str


def error_table_location(
    source_uri: str, source_name: str, settings: ErrorTableSettings
) -> ErrorTableLocation:
    """The error table of the table at ``source_uri`` named ``source_name``.

    Local (default): the sibling ``<source root><suffix>`` named ``<source name><suffix>``.
    Global (``name`` or ``base_path`` set; the suffix is ignored): ``<base_path>/<name>``,
    ``base_path`` defaulting to the directory that holds the source table (RFC-20: "same as
    the base path") and ``name`` to ``lakewarden_errors``."""
    root = source_uri.rstrip("/")
    if not settings.is_global:
        return ErrorTableLocation(root + settings.suffix, source_name + settings.suffix)
    name = settings.name or GLOBAL_NAME
    base = settings.base_path.rstrip("/") if settings.base_path else root.rsplit("/", 1)[0]
    return ErrorTableLocation(f"{base}/{name}", name)
