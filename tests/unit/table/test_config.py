"""TableConfig: validation, persistence and the named errors for non-tables and newer formats."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from _memstore import MemStorage

from lakewarden.errors import ConfigurationError, NonRetryableError
from lakewarden.table.config import (
    CONFIG_KEY,
    FORMAT_VERSION,
    InvalidTableConfigError,
    NotATableError,
    TableAlreadyExistsError,
    TableConfig,
    UnsupportedFormatVersionError,
    cast_table,
    decode_schema,
    encode_schema,
    load_config,
    parse_config,
    save_new_config,
)

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("amount", pa.float64()),
        pa.field("tags", pa.list_(pa.string())),
    ],
    metadata={b"owner": b"data-team"},
)


def make(**overrides: object) -> TableConfig:
    args: dict[str, object] = {
        "name": "orders",
        "record_key": "id",
        "schema": SCHEMA,
        "partition_by": ["region"],
        "ordering_field": "ts",
        "buckets": 4,
    }
    args.update(overrides)
    return TableConfig.new(**args)  # type: ignore[arg-type]


def test_schema_round_trips_exactly_through_json() -> None:
    config = make()
    again = parse_config(config.to_json())
    assert again == config
    assert again.pa_schema.equals(SCHEMA, check_metadata=True)
    assert decode_schema(encode_schema(SCHEMA)).equals(SCHEMA, check_metadata=True)


def test_readable_fields_are_persisted() -> None:
    raw = json.loads(make().to_json())
    assert raw["format_version"] == FORMAT_VERSION
    assert raw["fields"][0] == {"name": "id", "type": "int64", "nullable": False}
    assert raw["fields"][4]["type"] == "list<item: string>"
    assert raw["table_type"] == "cow"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"record_key": "nope"}, "record_key 'nope' is not a field of the schema"),
        ({"record_key": "amount"}, "record_key 'amount' has type double"),
        ({"partition_by": ["missing"]}, "partition_by field 'missing' is not a field"),
        ({"partition_by": ["tags"]}, "partition_by field 'tags' has type list<item: string>"),
        ({"partition_by": ["region", "region"]}, "partition_by names a field twice"),
        ({"ordering_field": "x"}, "ordering_field 'x' is not a field of the schema"),
        ({"ordering_field": "tags"}, "ordering_field 'tags' has type"),
        ({"buckets": 0}, "buckets: Input should be greater than or equal to 1"),
        ({"table_type": "merge"}, "table_type: Input should be 'cow' or 'mor'"),
        ({"name": ""}, "name: String should have at least 1 character"),
        (
            {"schema": pa.schema([("id", pa.int64()), ("_lw_record_key", pa.string())])},
            "reserved meta column names ['_lw_record_key']",
        ),
    ],
)
def test_invalid_configs_are_named(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTableConfigError, match="invalid table config") as info:
        make(**overrides)
    assert message in str(info.value)
    assert isinstance(info.value, ConfigurationError)


def test_table_id_must_be_uuid4() -> None:
    raw = json.loads(make().to_json())
    raw["table_id"] = "not-a-uuid"
    with pytest.raises(InvalidTableConfigError, match="is not a uuid4 string"):
        parse_config(json.dumps(raw).encode())


def test_fields_must_agree_with_arrow_schema() -> None:
    raw = json.loads(make().to_json())
    raw["fields"][0]["type"] = "string"
    with pytest.raises(InvalidTableConfigError, match="fields does not match arrow_schema"):
        parse_config(json.dumps(raw).encode())


def test_unknown_keys_are_rejected() -> None:
    raw = json.loads(make().to_json())
    raw["surprise"] = 1
    with pytest.raises(InvalidTableConfigError, match="surprise"):
        parse_config(json.dumps(raw).encode())


def test_newer_format_version_is_named_before_validation() -> None:
    raw = json.loads(make().to_json())
    raw["format_version"] = FORMAT_VERSION + 1
    raw["a_field_from_the_future"] = {"x": 1}
    with pytest.raises(
        UnsupportedFormatVersionError, match=f"format_version {FORMAT_VERSION + 1}"
    ) as info:
        parse_config(json.dumps(raw).encode(), location="s3://b/t")
    assert "Help: upgrade lakewarden" in str(info.value)
    assert isinstance(info.value, NonRetryableError)


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"name": "x"}'])
def test_garbage_config_is_invalid(data: bytes) -> None:
    with pytest.raises(InvalidTableConfigError):
        parse_config(data)


def test_save_then_load_and_create_twice_is_an_error() -> None:
    storage = MemStorage()
    config = make()
    save_new_config(storage, config)
    assert storage.exists(CONFIG_KEY)
    assert load_config(storage) == config
    with pytest.raises(TableAlreadyExistsError, match="a table already exists at 'mem://'"):
        save_new_config(storage, make())
    assert load_config(storage) == config  # the first config is untouched


def test_loading_a_non_table_is_named() -> None:
    with pytest.raises(NotATableError, match="'mem://' is not a lakewarden table"):
        load_config(MemStorage())


def test_cast_table_is_a_cast_that_keeps_a_table_already_in_shape() -> None:
    schema = pa.schema(
        [pa.field("k", pa.string(), nullable=False), ("v", pa.int32())], {b"a": b"b"}
    )
    shaped = pa.Table.from_arrays([pa.array(["x"]), pa.array([1], pa.int32())], schema=schema)
    assert cast_table(shaped, schema) is shaped
    loose = pa.table({"k": ["x"], "v": pa.array([1], pa.int64())})
    cast = cast_table(loose, schema)
    assert cast.schema.equals(schema, check_metadata=True) and cast.equals(loose.cast(schema))
    # A table claiming a non-nullable field it breaks is refused as Table.cast refuses it.
    lying = pa.Table.from_arrays(
        [pa.array([None], pa.string()), pa.array([1], pa.int32())], schema=schema
    )
    with pytest.raises(ValueError, match="non-nullable"):
        cast_table(lying, schema)
