"""Create on first write, as Hudi and Delta do: the table options of the ``lakewarden`` format.

    df.write.format("lakewarden").option("record_key", "id").option("partition_by", "region")
        .option("ordering_field", "ts").option("buckets", 8).mode("append").save(uri)

When no table exists at ``uri``, the first write creates it with the DataFrame's schema and
these options (``record_key`` is required then; the record key column becomes non-nullable).
When a table exists, every option given must agree with its config: a write that names another
record key, partitioning, ordering field, bucket count or table type is refused before anything
is written, with an error that names each difference. Options not given are not checked, so
later writes need none of them.

=====================  =========================================================================
``record_key``         the record key column (required to create)
``partition_by``       comma-separated partition columns ('' for none; default none)
``ordering_field``     the column whose larger value wins an upsert (default none)
``buckets``            file groups per partition (default 1)
``table_type``         ``cow`` (default) or ``mor``
``table_name``         the table's name (default: the last segment of the URI)
``publish.delta``      ``true``: publish every commit as a Delta Lake version (default false)
=====================  =========================================================================

Two first writers racing to create the table are settled by the config's put-if-absent write:
the loser reads the winner's config and checks its options against it like any later writer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import pyarrow as pa
from pyspark.sql.types import StructType

from lakewarden.spark._arrow import spark_arrow_schema
from lakewarden.spark._options import (
    InvalidOptionError,
    error_table_choice,
    get_option,
    load_settings,
)
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import (
    ErrorTableChoice,
    NotATableError,
    TableAlreadyExistsError,
    TableConfig,
    load_config,
    normalize_table_type,
    save_new_config,
)

OPT_RECORD_KEY = "record_key"
OPT_PARTITION_BY = "partition_by"
OPT_ORDERING_FIELD = "ordering_field"
OPT_BUCKETS = "buckets"
OPT_TABLE_TYPE = "table_type"
OPT_TABLE_NAME = "table_name"
OPT_PUBLISH_DELTA = "publish.delta"
TABLE_OPTIONS = (
    OPT_RECORD_KEY,
    OPT_PARTITION_BY,
    OPT_ORDERING_FIELD,
    OPT_BUCKETS,
    OPT_TABLE_TYPE,
    OPT_TABLE_NAME,
    OPT_PUBLISH_DELTA,
)
_TABLE_TYPES = ("cow", "mor")
log = logging.getLogger("lakewarden.spark")


class TableOptionsMismatchError(InvalidOptionError):
    """The table options of a write disagree with the existing table's config (an invalid
    option for this table: ``check_table_type`` raises the same branch).

    ``differences`` holds one ``option: given X, table has Y`` per disagreement."""

    def __init__(self, message: str, *, table: str, differences: tuple[str, ...]) -> None:
        super().__init__(message, table=table)
        self.differences = differences


@dataclass(frozen=True)
class TableOptions:
    """The table options of one write; None means "not given"."""

    record_key: str | None = None
    partition_by: tuple[str, ...] | None = None
    ordering_field: str | None = None
    buckets: int | None = None
    table_type: Literal["cow", "mor"] | None = None
    name: str | None = None
    publish_delta: bool | None = None
    # Recorded in the config of a table the write creates (not compared with an existing
    # table's: a write may send its errors elsewhere than the table's default).
    error_table: ErrorTableChoice | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TableOptions:
        """Raises: InvalidOptionError (a bad bucket count or table type)."""
        partition = get_option(options, OPT_PARTITION_BY)
        partition_by = (
            None
            if partition is None
            else tuple(p.strip() for p in partition.split(",") if p.strip())
        )
        return cls(
            record_key=_text(get_option(options, OPT_RECORD_KEY)),
            partition_by=partition_by,
            ordering_field=_text(get_option(options, OPT_ORDERING_FIELD)),
            buckets=_buckets(get_option(options, OPT_BUCKETS)),
            table_type=_table_type(get_option(options, OPT_TABLE_TYPE)),
            name=_text(get_option(options, OPT_TABLE_NAME)),
            publish_delta=_flag(OPT_PUBLISH_DELTA, get_option(options, OPT_PUBLISH_DELTA)),
            error_table=error_table_choice(options),
        )

    def differences(self, config: TableConfig) -> tuple[str, ...]:
        """Every given option that disagrees with ``config``, as ``option: given ..., table
        has ...`` (the table name is not compared: it is only a label)."""
        pairs: list[tuple[str, object, object]] = [
            (OPT_RECORD_KEY, self.record_key, config.record_key),
            (OPT_PARTITION_BY, self.partition_by, config.partition_by),
            (OPT_ORDERING_FIELD, self.ordering_field, config.ordering_field),
            (OPT_BUCKETS, self.buckets, config.buckets),
            (OPT_TABLE_TYPE, self.table_type, config.table_type),
            (OPT_PUBLISH_DELTA, self.publish_delta, config.publish.delta),
        ]
        return tuple(
            f"{name}: given {_show(given)}, the table has {_show(actual)}"
            for name, given, actual in pairs
            if given is not None and given != actual
        )

    def new_config(self, uri: str, schema: pa.Schema) -> TableConfig:
        """The config of a table created by this write, with ``schema`` (the DataFrame's, in
        Arrow) and the record key made non-nullable.

        Raises: NotATableError (no record_key option), InvalidTableConfigError."""
        if self.record_key is None:
            raise NotATableError(
                f"{uri!r} is not a lakewarden table, and the write gives no "
                f"{OPT_RECORD_KEY!r} option to create it. Help: "
                f".option('{OPT_RECORD_KEY}', '<column>') (and optionally "
                f"'{OPT_PARTITION_BY}', '{OPT_ORDERING_FIELD}', '{OPT_BUCKETS}', "
                f"'{OPT_TABLE_TYPE}') creates it on the first write; or check the URI.",
                table=uri,
            )
        fields = [f.with_nullable(False) if f.name == self.record_key else f for f in schema]
        return TableConfig.new(
            name=self.name or default_table_name(uri),
            record_key=self.record_key,
            schema=pa.schema(fields),
            partition_by=self.partition_by or (),
            ordering_field=self.ordering_field,
            table_type=self.table_type or "cow",
            buckets=self.buckets or 1,
            publish_delta=bool(self.publish_delta),
            error_table=self.error_table,
        )


def default_table_name(uri: str) -> str:
    """The last segment of ``uri`` (``s3://b/lake/orders/`` -> ``orders``)."""
    segment = uri.rstrip("/").rsplit("/", 1)[-1]
    return segment or "table"


def ensure_table(storage: Storage, options: TableOptions, schema: pa.Schema) -> TableConfig:
    """The table's config, creating the table first when absent (the module docstring).

    Raises: NotATableError (absent, and no record_key to create it), InvalidTableConfigError
    (the options do not fit the DataFrame's schema), TableOptionsMismatchError."""
    try:
        config = load_config(storage)
    except NotATableError:
        config = options.new_config(storage.uri, schema)
        try:
            save_new_config(storage, config)
        except TableAlreadyExistsError:
            config = load_config(storage)  # another first writer won: check against its config
        else:
            log.info(
                "created table %s at %s (record_key=%s, partition_by=%s, buckets=%d)",
                config.name,
                storage.uri,
                config.record_key,
                list(config.partition_by),
                config.buckets,
            )
            return config
    check_matches(config, options, storage.uri)
    return config


def prepare_table(
    uri: str, settings_json: str | None, options: Mapping[str, str], schema: StructType
) -> TableConfig:
    """``ensure_table`` for a Spark write of a DataFrame with ``schema`` to ``uri``.

    Raises: see ``ensure_table``; InvalidOptionError."""
    storage = open_storage(uri, load_settings(settings_json))
    return ensure_table(storage, TableOptions.parse(options), spark_arrow_schema(schema))


def check_matches(config: TableConfig, options: TableOptions, uri: str) -> None:
    """Raises: TableOptionsMismatchError naming every difference."""
    differences = options.differences(config)
    if differences:
        raise TableOptionsMismatchError(
            f"the write's table options disagree with the existing table {config.name!r} at "
            f"{uri!r}: {'; '.join(differences)}. Help: drop these options (an existing table "
            "keeps its config), or write to another location; nothing was written.",
            table=config.name,
            differences=differences,
        )


def _text(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def _flag(option: str, value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidOptionError(
            f"option {option!r} is {value!r}; it must be 'true' or 'false'. "
            f"Help: .option('{option}', 'true')."
        )
    return text == "true"


def _buckets(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        buckets = int(value)
    except ValueError:
        buckets = 0
    if buckets < 1:
        raise InvalidOptionError(f"option {OPT_BUCKETS} must be an integer >= 1, got {value!r}")
    return buckets


def _table_type(value: str | None) -> Literal["cow", "mor"] | None:
    if value is None:
        return None
    lowered = normalize_table_type(value.strip())  # copy_on_write / merge_on_read too
    if lowered not in _TABLE_TYPES:
        raise InvalidOptionError(
            f"option {OPT_TABLE_TYPE} must be one of {', '.join(_TABLE_TYPES)}, got {value!r}"
        )
    return cast(Literal["cow", "mor"], lowered)


def _show(value: object) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


__all__ = [
    "TABLE_OPTIONS",
    "TableOptions",
    "TableOptionsMismatchError",
    "check_matches",
    "default_table_name",
    "ensure_table",
    "prepare_table",
]
