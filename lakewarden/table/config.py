"""The table configuration, persisted at ``.lakewarden/table.json``.

The schema is stored twice: ``arrow_schema`` is the Arrow IPC serialisation of the
``pyarrow.Schema`` (base64), which round-trips exactly (types, nullability, metadata) and is
what lakewarden reads; ``fields`` is a readable list of ``name: type`` for people and tools
that do not speak Arrow. Loading checks that the two agree.

Reading a config is two-phase: the ``format_version`` is checked before anything else so that
a table written by a newer lakewarden fails with ``UnsupportedFormatVersionError`` rather than
with a validation error about fields this version does not know.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lakewarden.errors import ConfigurationError, NonRetryableError
from lakewarden.names import InvalidNameError, check_table_name
from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage
from lakewarden.table.clean.policy import CleanPolicy

# 1: every data file stores the four meta columns. 2: base files leave out the two that their
# path gives (``VIRTUAL_META_COLUMNS``); readers fill them from it.
FORMAT_VERSION = 2
CONFIG_KEY = ".lakewarden/table.json"

# The meta columns of every record (Hudi's ``_hoodie_*`` meta columns), before the table's.
META_COMMIT_TIME = "_lw_commit_time"
META_RECORD_KEY = "_lw_record_key"
META_PARTITION_PATH = "_lw_partition_path"
META_FILE_NAME = "_lw_file_name"
META_COLUMNS = (META_COMMIT_TIME, META_RECORD_KEY, META_PARTITION_PATH, META_FILE_NAME)
# The meta columns a base file's key gives (``<partition path>/<file name>``): from format
# version 2 they are not stored, and every reader fills them from the key (``with_virtual``).
VIRTUAL_META_COLUMNS = (META_PARTITION_PATH, META_FILE_NAME)


def meta_field(name: str) -> pa.Field:
    """The field of meta column ``name`` in every file schema (text, never null): a column
    added under it needs no cast into the file schema."""
    return pa.field(name, pa.string(), nullable=False)


def cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table.cast(schema)``, which is ``table`` itself when it has ``schema`` already (then
    only the cast's null check of non-nullable fields remains, kept here). Writers conform
    every file's rows this way; a cast of a table already in shape costs a cast call per
    column, which a write of many small files feels."""
    if table.schema.equals(schema, check_metadata=True) and not any(
        table.column(i).null_count for i, field in enumerate(schema) if not field.nullable
    ):
        return table
    return table.cast(schema)


class NotATableError(NonRetryableError):
    """The location holds no ``.lakewarden/table.json``."""


class UnsupportedFormatVersionError(NonRetryableError):
    """The table was written by a newer lakewarden than this one."""


class TableAlreadyExistsError(NonRetryableError):
    """``Table.create`` found a table config already at the location."""


class InvalidTableConfigError(ConfigurationError):
    """The table configuration is inconsistent (unknown fields, unusable types, ...)."""


class SchemaField(BaseModel):
    """One top-level field, for people reading ``table.json``."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    nullable: bool


def _key_type_ok(t: pa.DataType) -> bool:
    # Keys are hashed and compared as strings; floats have no stable text form.
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def _ordering_type_ok(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def _partition_type_ok(t: pa.DataType) -> bool:
    return bool(_key_type_ok(t) or pa.types.is_boolean(t))


def encode_schema(schema: pa.Schema) -> str:
    """Arrow IPC serialisation of ``schema``, base64 (the persisted form)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(encoded: str) -> pa.Schema:
    """Inverse of ``encode_schema``. Raises: InvalidTableConfigError."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded, validate=True)))
    # OSError: pyarrow reports a damaged flatbuffer as a plain OSError (found by fuzzing).
    except (ValueError, OSError, pa.ArrowException) as err:
        raise InvalidTableConfigError(
            f"arrow_schema is not a valid Arrow IPC schema: {err}"
        ) from err


def describe_fields(schema: pa.Schema) -> tuple[SchemaField, ...]:
    return tuple(SchemaField(name=f.name, type=str(f.type), nullable=f.nullable) for f in schema)


TableType = Literal["cow", "mor"]
# The long names users may pass (Hudi's COPY_ON_WRITE / MERGE_ON_READ); persisted short.
TABLE_TYPE_ALIASES: dict[str, str] = {"copy_on_write": "cow", "merge_on_read": "mor"}


def normalize_table_type(value: str) -> str:
    """``cow`` or ``mor`` for either spelling (case-insensitive); other values unchanged (the
    config's validation names them)."""
    lowered = value.lower()
    return TABLE_TYPE_ALIASES.get(lowered, lowered)


class PublishConfig(BaseModel):
    """Whether the table is published as a Delta Lake log (``lakewarden.publish``).

    ``since_seq``: the timeline seq whose snapshot Delta version 0 holds (-1: the table was
    created with publishing on, so version 0 is the empty table); version ``k >= 1`` is the
    ``k``-th instant completed after it. ``checkpoint_interval``: a Parquet checkpoint every
    that many versions (0: none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    delta: bool = False
    since_seq: int = Field(default=-1, ge=-1)
    checkpoint_interval: int = Field(default=10, ge=0)


class ErrorTableChoice(BaseModel):
    """Where a table's failed records go (Hudi RFC-20 lets each table choose): ``local``, the
    table ``<table root><suffix>`` beside it, or ``global``, one table ``<base_path>/<name>``
    shared by many. A field left None takes the process's ``error_table`` settings
    (``lakewarden.errortable.location``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["local", "global"]
    suffix: str | None = Field(default=None, min_length=1, description="local only")
    name: str | None = Field(default=None, min_length=1, description="global only")
    base_path: str | None = Field(default=None, min_length=1, description="global only")

    @model_validator(mode="after")
    def _fits_kind(self) -> ErrorTableChoice:
        if self.kind == "local" and (self.name is not None or self.base_path is not None):
            raise ValueError("a local error table has no name or base_path (only a suffix)")
        if self.kind == "global" and self.suffix is not None:
            raise ValueError("a global error table has no suffix (only a name and base_path)")
        return self


class TableConfig(BaseModel):
    """What a table is: persisted once by ``Table.create``, never rewritten by writers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = Field(default=FORMAT_VERSION, ge=1, le=FORMAT_VERSION)
    table_id: str = Field(description="uuid4 string; the table's identity on the timeline")
    name: str = Field(min_length=1)
    table_type: TableType = "cow"
    record_key: str
    partition_by: tuple[str, ...] = ()
    ordering_field: str | None = None
    buckets: int = Field(default=1, ge=1)
    arrow_schema: str = Field(description="Arrow IPC schema, base64")
    fields: tuple[SchemaField, ...] = Field(description="readable copy of arrow_schema")
    # How cleans retain old file versions (tables created before it clean with the defaults).
    clean_policy: CleanPolicy = Field(default_factory=CleanPolicy)
    # Publishing as a Delta Lake log; the one setting ``lakewarden publish enable`` rewrites.
    publish: PublishConfig = Field(default_factory=PublishConfig)
    # Where its failed records go; None: the writer's and the error-sink's settings decide.
    error_table: ErrorTableChoice | None = None

    @model_validator(mode="after")
    def _check(self) -> TableConfig:
        try:
            if uuid.UUID(self.table_id).version != 4:
                raise ValueError("not version 4")
        except ValueError as err:
            raise ValueError(f"table_id {self.table_id!r} is not a uuid4 string") from err
        schema = decode_schema(self.arrow_schema)
        if describe_fields(schema) != self.fields:
            raise ValueError("fields does not match arrow_schema")
        _check_columns(schema, self.record_key, self.partition_by, self.ordering_field)
        return self

    @cached_property
    def pa_schema(self) -> pa.Schema:
        """The table's Arrow schema (user columns only, without meta columns)."""
        return decode_schema(self.arrow_schema)

    @classmethod
    def new(
        cls,
        *,
        name: str,
        record_key: str,
        schema: pa.Schema,
        partition_by: Sequence[str] = (),
        ordering_field: str | None = None,
        table_type: str = "cow",
        buckets: int = 1,
        clean_policy: CleanPolicy | None = None,
        publish_delta: bool = False,
        error_table: ErrorTableChoice | None = None,
        format_version: int = FORMAT_VERSION,
    ) -> TableConfig:
        """A config with a fresh table id; ``table_type`` is ``cow``/``copy_on_write`` or
        ``mor``/``merge_on_read``; ``publish_delta`` publishes every completed instant as a
        Delta Lake version from the start; ``format_version`` 1 makes a table whose files
        store every meta column (for readers of lakewarden before version 2).
        Raises: InvalidTableConfigError."""
        try:
            if name:  # empty: the field's own rule says so, with the other field errors
                check_table_name(name)
        except InvalidNameError as err:
            raise InvalidTableConfigError(f"invalid table config: name: {err}") from err
        return _validated(
            format_version=format_version,
            clean_policy=clean_policy or CleanPolicy(),
            publish=PublishConfig(delta=publish_delta),
            error_table=error_table,
            table_id=str(uuid.uuid4()),
            name=name,
            table_type=normalize_table_type(table_type),
            record_key=record_key,
            partition_by=tuple(partition_by),
            ordering_field=ordering_field,
            buckets=buckets,
            arrow_schema=encode_schema(schema),
            fields=describe_fields(schema),
        )

    @cached_property
    def file_schema(self) -> pa.Schema:
        """The schema of every data file: the meta columns, then the table's columns."""
        meta = [meta_field(name) for name in META_COLUMNS]
        return pa.schema(meta + list(self.pa_schema), metadata=self.pa_schema.metadata)

    @cached_property
    def merge_schema(self) -> pa.Schema:
        """The schema merges work in: ``file_schema`` without ``_lw_file_name`` (set when a
        file is written)."""
        schema = self.file_schema
        return schema.remove(schema.get_field_index(META_FILE_NAME))

    @property
    def virtual_columns(self) -> tuple[str, ...]:
        """The meta columns base files leave out (none before format version 2)."""
        return VIRTUAL_META_COLUMNS if self.format_version >= 2 else ()

    @cached_property
    def stored_schema(self) -> pa.Schema:
        """The schema a base file stores: ``file_schema`` without ``virtual_columns``."""
        schema = self.file_schema
        for name in self.virtual_columns:
            schema = schema.remove(schema.get_field_index(name))
        return schema

    def stored_rows(self, table: pa.Table, name: str) -> pa.Table:
        """``table`` (the file schema, with or without ``_lw_file_name``) as the base file
        ``name`` stores it: in ``stored_schema``, ``_lw_file_name`` set to ``name`` where it
        is stored."""
        if META_FILE_NAME in table.schema.names:
            table = table.drop_columns([META_FILE_NAME])
        if META_FILE_NAME not in self.virtual_columns:
            names = pa.repeat(pa.scalar(name), len(table))
            table = table.append_column(meta_field(META_FILE_NAME), names)
        return cast_table(table.select(self.stored_schema.names), self.stored_schema)

    def with_virtual(
        self,
        table: pa.Table,
        key: str,
        partition_path: str,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """``table`` (columns read from the base file at ``key``, in file schema order) with
        the virtual meta columns among ``columns`` (None: all) added where missing, at their
        file schema positions: the values a format version 1 file stores for them."""
        wanted = self.virtual_columns if columns is None else columns
        names = table.schema.names
        missing = [n for n in self.virtual_columns if n in wanted and n not in names]
        if not missing:
            return table
        values = {META_PARTITION_PATH: partition_path, META_FILE_NAME: key.rsplit("/", 1)[-1]}
        index = self.file_schema.get_field_index
        for name in missing:
            position = index(name)
            before = sum(1 for n in table.schema.names if index(n) < position)
            column = pa.repeat(pa.scalar(values[name], pa.string()), len(table))
            table = table.add_column(before, self.file_schema.field(name), column)
        return table

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == "mor"

    def to_json(self) -> bytes:
        # A table without an error-table choice is written as before the field existed, so
        # a reader that predates it still opens the table.
        unset = {"error_table"} if self.error_table is None else None
        return self.model_dump_json(indent=2, exclude=unset).encode("utf-8")


def _check_columns(
    schema: pa.Schema, record_key: str, partition_by: tuple[str, ...], ordering: str | None
) -> None:
    names = schema.names
    if len(set(names)) != len(names):
        raise ValueError(f"schema has duplicate field names: {names}")
    meta = sorted(set(names) & set(META_COLUMNS))
    if meta:
        raise ValueError(f"schema uses reserved meta column names {meta}")

    def field(role: str, name: str, ok: Any, what: str) -> None:
        if name not in names:
            raise ValueError(f"{role} {name!r} is not a field of the schema (fields: {names})")
        t = schema.field(name).type
        if not ok(t):
            raise ValueError(f"{role} {name!r} has type {t}; it must be {what}")

    field("record_key", record_key, _key_type_ok, "an integer, string, date, timestamp or decimal")
    if len(set(partition_by)) != len(partition_by):
        raise ValueError(f"partition_by names a field twice: {list(partition_by)}")
    for p in partition_by:
        field("partition_by field", p, _partition_type_ok, "a primitive non-float type")
    if ordering is not None:
        field("ordering_field", ordering, _ordering_type_ok, "a number, temporal or string")


def _validated(**values: Any) -> TableConfig:
    try:
        return TableConfig(**values)
    except ValidationError as err:
        raise InvalidTableConfigError(f"invalid table config: {_summary(err)}") from err


def _summary(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in err.errors()
    )


def parse_config(data: bytes, *, location: str = "") -> TableConfig:
    """Parse a persisted config, checking the format version first.

    Raises: UnsupportedFormatVersionError, InvalidTableConfigError."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise InvalidTableConfigError(f"{location}{CONFIG_KEY} is not JSON: {err}") from err
    if not isinstance(raw, dict):
        raise InvalidTableConfigError(f"{location}{CONFIG_KEY} is not a JSON object")
    version = raw.get("format_version")
    if not isinstance(version, int):
        raise InvalidTableConfigError(f"{location}{CONFIG_KEY} has no integer format_version")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatVersionError(
            f"table at {location!r} has format_version {version}; this lakewarden reads up to "
            f"{FORMAT_VERSION}. Help: upgrade lakewarden to open this table."
        )
    return _validated(**raw)


def load_config(storage: Storage) -> TableConfig:
    """Read the config of the table rooted at ``storage``.

    Raises: NotATableError, UnsupportedFormatVersionError, InvalidTableConfigError."""
    try:
        data = storage.read(CONFIG_KEY)
    except NotFoundError as err:
        raise NotATableError(
            f"{storage.uri!r} is not a lakewarden table: it has no {CONFIG_KEY}. "
            "Help: check the URI, or create the table with lakewarden.Table.create."
        ) from err
    return parse_config(data, location=storage.uri)


def save_new_config(storage: Storage, config: TableConfig) -> None:
    """Persist the config of a new table, atomically and only if none exists.

    Raises: TableAlreadyExistsError."""
    try:
        storage.write_if_absent(CONFIG_KEY, config.to_json())
    except AlreadyExistsError as err:
        raise TableAlreadyExistsError(
            f"a table already exists at {storage.uri!r}. "
            "Help: open it with lakewarden.Table.open, or choose another location.",
            table=storage.uri,
        ) from err
