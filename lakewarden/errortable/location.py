"""Where a table's failed records go: local ``<table root><suffix>`` or one global table.

The choice is made per table (RFC-20 lets each writer choose), most specific first:

1. the write's own option (a Spark write's ``error_table`` options, ``lakewarden ingest
   --error-table``);
2. the table's config (``TableConfig.error_table``, recorded at creation);
3. the process's ``error_table`` settings (``LAKEWARDEN_ERROR_TABLE__*``).

A choice's fields left None take the settings'. When the write or the table chose, the
writer resolves the location and puts it in every ``ErrorRecord``'s context
(``errorTableUri``, ``errorTableName``: ``chosen_location``), so one error-sink commits each
record where its writer chose, whatever the sink's own settings say. Records without those
keys (no choice, or older writers) are placed by the sink's settings, as before the choice
existed.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.errortable.records import ERROR_TABLE_NAME, ERROR_TABLE_URI
from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.table.config import ErrorTableChoice, TableConfig

GLOBAL_NAME = "lakewarden_errors"


@dataclass(frozen=True, slots=True)
class ErrorTableLocation:
    """An error table's root and name."""

    uri: str
    name: str


def error_table_location(
    source_uri: str,
    source_name: str,
    settings: ErrorTableSettings,
    *choices: ErrorTableChoice | None,
) -> ErrorTableLocation:
    """The error table of the table at ``source_uri`` named ``source_name``: by the first of
    ``choices`` that is not None (the write's, then the table's), else by ``settings``.

    Local: the sibling ``<source root><suffix>`` named ``<source name><suffix>``. Global:
    ``<base_path>/<name>``, ``base_path`` defaulting to the directory that holds the source
    table (RFC-20: "same as the base path") and ``name`` to ``lakewarden_errors``."""
    choice = next((c for c in choices if c is not None), None)
    root = source_uri.rstrip("/")
    is_global = settings.is_global if choice is None else choice.kind == "global"
    if not is_global:
        suffix = (choice.suffix if choice is not None else None) or settings.suffix
        return ErrorTableLocation(root + suffix, source_name + suffix)
    name = (choice.name if choice is not None else None) or settings.name or GLOBAL_NAME
    base_path = (choice.base_path if choice is not None else None) or settings.base_path
    base = base_path.rstrip("/") if base_path else root.rsplit("/", 1)[0]
    return ErrorTableLocation(f"{base}/{name}", name)


def chosen_location(
    source_uri: str,
    config: TableConfig,
    settings: Settings,
    write_choice: ErrorTableChoice | None = None,
) -> dict[str, str]:
    """The ``ErrorRecord`` context keys naming the error table the write (``write_choice``)
    or the table (its config) chose; empty when neither did (the sink's settings decide)."""
    if write_choice is None and config.error_table is None:
        return {}
    location = error_table_location(
        source_uri, config.name, settings.error_table, write_choice, config.error_table
    )
    return {ERROR_TABLE_URI: location.uri, ERROR_TABLE_NAME: location.name}
