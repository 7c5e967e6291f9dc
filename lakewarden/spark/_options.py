"""The options of the ``lakewarden`` format, parsed once into frozen values.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping (keys arrive
lower-cased). Everything the write path carries from the driver to the executors is in a
``WriteSpec``: small, frozen, picklable, and holding no client, so the writer object Spark
pickles to every task stays a few hundred bytes.

Options (case-insensitive):

=========================================  =====================================================
``path``                                   the table URI (``save(uri)`` / ``load(uri)``)
``operation``                              ``insert`` (default) or ``bulk_insert``; ``upsert``,
                                           ``delete`` only through ``lakewarden.spark.write``
``as_of``                                  read: a completed instant (time travel)
``since``                                  read: incremental, records written after the instant
``columns``                                read: comma-separated columns to read (pruning)
``filters``                                read: pyarrow DNF filters as JSON, applied after the
                                           merge; prunes partitions (see ``_pushdown``)
``lakewarden.settings``                    JSON of ``lakewarden.settings.Settings`` for workers
                                           without S3 credentials (default: each process reads
                                           ``LAKEWARDEN_*`` env)
``lakewarden.ingest_errors``               ``true``: the rows carry ``_bad_rows.INGEST_COLUMNS``
                                           (``route_bad_records(..., "error-table")``); the bad
                                           ones go to the error table
``lakewarden.until`` / ``lakewarden.slices`` set by ``lakewarden.spark.read``: pin a ``since``
                                           read's last instant; ``merged`` reads only the
                                           merge-on-read slices with log blocks
``error_table``                            ``local`` or ``global``: where this write's bad
                                           rows go (recorded in the config of a table the
                                           write creates); ``error_table.suffix`` (local),
                                           ``error_table.name`` and ``error_table.base_path``
                                           (global); unset: the table's config, else
                                           ``Settings.error_table``
``committer.threads``                      the job commit's store I/O threads (1-256)
``committer.validate_output``              ``true``: check every committed file's size, and its
                                           etag where the store has one
``committer.cleanup``                      ``false``: keep the job's ``_temporary`` directory
                                           for diagnosis (``Settings.committer`` otherwise;
                                           see ``committer_options``)
=========================================  =====================================================
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from lakewarden.errors import ConfigurationError
from lakewarden.settings import CommitterSettings, Settings
from lakewarden.table.config import ErrorTableChoice, TableConfig, normalize_table_type

WriteOperation = Literal["insert", "bulk_insert", "upsert", "delete", "insert_overwrite_table"]
# Operations the plain format accepts; upsert and delete need the shuffle of the helper.
FORMAT_OPERATIONS = ("insert", "bulk_insert")
HELPER_OPERATIONS = ("insert", "bulk_insert", "upsert", "delete")
OVERWRITE = "insert_overwrite_table"

OPT_PATH = "path"
OPT_OPERATION = "operation"
OPT_AS_OF = "as_of"
OPT_SINCE = "since"
OPT_COLUMNS = "columns"
OPT_SETTINGS = "lakewarden.settings"
# The table type the writer expects ("copy_on_write"/"cow" or "merge_on_read"/"mor"): a write
# to a table of the other type is refused before anything is written.
OPT_TABLE_TYPE = "table_type"
OPT_INGEST_ERRORS = "lakewarden.ingest_errors"
OPT_UNTIL = "lakewarden.until"
OPT_SLICES = "lakewarden.slices"
SLICES_MERGED = "merged"
OPT_FILTERS = "filters"
COMMITTER_PREFIX = "committer."
OPT_ERROR_TABLE = "error_table"


class InvalidOptionError(ConfigurationError):
    """An option of the ``lakewarden`` format is missing or has a bad value."""


def get_option(options: Mapping[str, str], key: str) -> str | None:
    # Spark lower-cases keys; a plain dict from a test may not.
    for name, value in options.items():
        if name.lower() == key:
            return value
    return None


def check_table_type(options: Mapping[str, str], config: TableConfig) -> None:
    """The ``table_type`` option, when given, names the table's type.

    Raises: InvalidOptionError."""
    expected = get_option(options, OPT_TABLE_TYPE)
    if expected is None:
        return
    if normalize_table_type(expected) not in ("cow", "mor"):
        raise InvalidOptionError(
            f"option {OPT_TABLE_TYPE}={expected!r} is neither copy_on_write nor merge_on_read"
        )
    if normalize_table_type(expected) != config.table_type:
        raise InvalidOptionError(
            f"option {OPT_TABLE_TYPE}={expected!r}, but table {config.name!r} is "
            f"{'merge_on_read' if config.merge_on_read else 'copy_on_write'}; nothing was "
            "written. Help: the type is fixed when the table is created (Table.create"
            "(..., table_type=...)); drop the option or write to a table of that type."
        )


def table_uri(options: Mapping[str, str]) -> str:
    """The table URI. Raises: InvalidOptionError when no path was given."""
    uri = get_option(options, OPT_PATH)
    if not uri:
        raise InvalidOptionError(
            "the lakewarden format needs the table URI. Help: .save(uri) / .load(uri), or "
            ".option('path', uri)."
        )
    return uri


def settings_json(options: Mapping[str, str]) -> str | None:
    return get_option(options, OPT_SETTINGS)


def load_settings(encoded: str | None) -> Settings:
    """Settings from the ``lakewarden.settings`` option, else from the environment. The S3
    credentials come from this process's environment (``LAKEWARDEN_S3__*``), or, unset there,
    from boto3's credential chain: ``encode_settings`` never puts them in the option (JSON
    written by hand that holds them is still honoured when the environment has none).

    Built once per option value and ``LAKEWARDEN_*`` environment in a process (``Settings``
    is frozen, so callers share it): building one reads and validates the environment (about
    4 ms), and a write task or a micro-batch's driver asks several times.

    Raises: InvalidOptionError."""
    return _load_settings(encoded, _lakewarden_environment())


def _lakewarden_environment() -> tuple[tuple[str, str], ...]:
    """The variables ``Settings`` reads (its prefix, in any case, as pydantic-settings
    matches them)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith(_PREFIX)))


_PREFIX = "LAKEWARDEN_"


@functools.lru_cache(maxsize=32)
def _load_settings(encoded: str | None, environment: tuple[tuple[str, str], ...]) -> Settings:
    """``load_settings`` for ``encoded`` in ``environment`` (the cache key: the environment is
    read again by ``Settings()``)."""
    own = Settings()
    if encoded is None:
        return own
    try:
        settings = Settings.model_validate(json.loads(encoded))
    except (ValueError, TypeError) as err:
        raise InvalidOptionError(
            f"option {OPT_SETTINGS} is not valid settings JSON: {err}"
        ) from err
    if not own.s3.has_credentials:
        return settings
    credentials = {
        "access_key_id": own.s3.access_key_id,
        "secret_access_key": own.s3.secret_access_key,
    }
    return settings.model_copy(update={"s3": settings.s3.model_copy(update=credentials)})


def encode_settings(settings: Settings) -> str:
    """The ``lakewarden.settings`` option value for ``settings``, without S3 credentials.

    The option travels inside the Spark plan (the UI, event logs, the history server), so no
    secret goes in it: every process of the write (driver, executors) reads the credentials
    from its own environment or boto3's chain (``load_settings``). Local-mode Python workers
    inherit the driver's environment; on a cluster, give the executors credentials through
    their environment or an instance/pod role.
    """
    data = settings.model_dump(mode="json", exclude={"s3": {"access_key_id", "secret_access_key"}})
    return json.dumps(data)


def ingest_errors(options: Mapping[str, str]) -> bool:
    return (get_option(options, OPT_INGEST_ERRORS) or "").lower() == "true"


def error_table_choice(options: Mapping[str, str]) -> ErrorTableChoice | None:
    """The ``error_table`` options (``local`` / ``global``, with ``error_table.suffix``,
    ``error_table.name``, ``error_table.base_path``) as an ``ErrorTableChoice``; None when
    ``error_table`` is not given.

    Raises: InvalidOptionError (a bad kind, a field of the other kind, or a field without
    ``error_table``)."""
    prefix = OPT_ERROR_TABLE + "."
    fields = {
        key.lower()[len(prefix) :]: value.strip()
        for key, value in options.items()
        if key.lower().startswith(prefix)
    }
    kind = get_option(options, OPT_ERROR_TABLE)
    if kind is None:
        if fields:
            raise InvalidOptionError(
                f"options {sorted(prefix + f for f in fields)} need option {OPT_ERROR_TABLE} "
                "(local or global)"
            )
        return None
    try:
        return ErrorTableChoice.model_validate({"kind": kind.strip().lower(), **fields})
    except ValidationError as err:
        problems = "; ".join(e["msg"] for e in err.errors())
        raise InvalidOptionError(
            f"bad error_table options: {problems}. Help: error_table=local (with "
            "error_table.suffix) or error_table=global (with error_table.name, "
            "error_table.base_path)."
        ) from err


def committer_options(options: Mapping[str, str]) -> CommitterSettings | None:
    """The ``committer.*`` options (``threads``, ``validate_output``, ``cleanup``) as
    ``CommitterSettings``; each one set wins over ``Settings.committer`` for this write, in
    the driver's job commit and in job-committer's. None when none is set.

    Raises: InvalidOptionError (an unknown ``committer.*`` option or a bad value)."""
    raw = {
        key.lower()[len(COMMITTER_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(COMMITTER_PREFIX)
    }
    if not raw:
        return None
    try:
        return CommitterSettings.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"committer.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise InvalidOptionError(
            f"bad committer option: {problems}. Help: committer.threads takes 1-256, "
            "committer.validate_output and committer.cleanup take true or false."
        ) from err


@dataclass(frozen=True)
class WriteSpec:
    """What every process of one write needs to know (pickled to the tasks)."""

    uri: str
    instant: str
    job_id: str
    operation: str
    settings_json: str | None = None
    # Set by lakewarden.spark.write: the rows are clustered by file group (one task per file
    # group), so tasks merge; and it appended ``inflight`` itself before the tasks ran.
    merge: bool = False
    profiled: bool = False
    # Rows carry the ingestion's bad-record columns (``_bad_rows.INGEST_COLUMNS``).
    ingest_errors: bool = False
    # The write's ``committer.*`` options (``committer_options``).
    committer: CommitterSettings | None = None
    # The write's ``error_table`` options (``error_table_choice``).
    error_table: ErrorTableChoice | None = None

    def settings(self) -> Settings:
        return load_settings(self.settings_json)


def write_operation(options: Mapping[str, str], overwrite: bool) -> str:
    """The operation of a plain-format write. Raises: InvalidOptionError."""
    operation = (get_option(options, OPT_OPERATION) or "insert").lower()
    if operation not in FORMAT_OPERATIONS:
        raise InvalidOptionError(
            f"operation {operation!r} is not supported by df.write.format('lakewarden'): use "
            f"one of {', '.join(FORMAT_OPERATIONS)}. Help: upserts and deletes need rows "
            "clustered by file group; use lakewarden.spark.write(df, uri, operation=...)."
        )
    return OVERWRITE if overwrite else operation


@dataclass(frozen=True)
class ReadSpec:
    """What a read needs (pickled to the tasks with the reader)."""

    uri: str
    as_of: str | None = None
    since: str | None = None
    columns: tuple[str, ...] | None = None
    settings_json: str | None = None
    # Set by lakewarden.spark.read, which reads the plain Parquet files itself: the last
    # instant of a ``since`` read (so both halves see the same instants), and whether to read
    # only the merge-on-read slices that have log blocks.
    until: str | None = None
    merged_only: bool = False
    # The ``filters`` option as given (JSON; ``_pushdown.filters_expression`` reads it).
    filters: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadSpec:
        """Raises: InvalidOptionError."""
        as_of, since = get_option(options, OPT_AS_OF), get_option(options, OPT_SINCE)
        if as_of is not None and since is not None:
            raise InvalidOptionError(
                "options as_of and since exclude each other: as_of reads a snapshot, since "
                "reads the changes after an instant up to the latest."
            )
        columns = get_option(options, OPT_COLUMNS)
        names = tuple(c.strip() for c in columns.split(",") if c.strip()) if columns else None
        slices = (get_option(options, OPT_SLICES) or "all").lower()
        if slices not in ("all", SLICES_MERGED):
            raise InvalidOptionError(
                f"option {OPT_SLICES} is 'all' or '{SLICES_MERGED}', not {slices!r}"
            )
        return cls(
            table_uri(options),
            as_of,
            since,
            names,
            settings_json(options),
            until=get_option(options, OPT_UNTIL),
            merged_only=slices == SLICES_MERGED,
            filters=get_option(options, OPT_FILTERS),
        )

    def settings(self) -> Settings:
        return load_settings(self.settings_json)
