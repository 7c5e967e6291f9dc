"""``lakewarden.table.schema_check``: the input schema check in its two modes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakewarden.errors import NonRetryableError
from lakewarden.table.config import TableConfig
from lakewarden.table.schema_check import (
    SchemaMismatchError,
    SchemaMode,
    castable,
    check_input_schema,
    needed_columns,
    values_fit,
)

TABLE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("region", pa.string()),
        ("n", pa.int32()),
    ]
)


@pytest.fixture
def config() -> TableConfig:
    return TableConfig.new(name="t", record_key="id", schema=TABLE_SCHEMA, partition_by=["region"])


def test_needed_columns(config: TableConfig) -> None:
    assert needed_columns(config, "insert") == ["id", "region", "n"]
    assert needed_columns(config, "upsert") == ["id", "region", "n"]
    assert needed_columns(config, "delete") == ["id", "region"]


@pytest.mark.parametrize("mode", ["exact", "castable"])
def test_the_table_schema_passes_both_modes(config: TableConfig, mode: SchemaMode) -> None:
    check_input_schema(TABLE_SCHEMA, config, "insert", mode=mode)
    keys = pa.schema([("id", pa.int64()), ("region", pa.string()), ("other", pa.string())])
    check_input_schema(keys, config, "delete", mode=mode)  # a delete may carry other columns


def test_a_castable_type_passes_castable_and_fails_exact(config: TableConfig) -> None:
    wider = pa.schema([("id", pa.int64()), ("region", pa.string()), ("n", pa.int64())])
    check_input_schema(wider, config, "upsert", mode="castable")
    with pytest.raises(SchemaMismatchError) as info:
        check_input_schema(wider, config, "upsert", mode="exact")
    err = info.value
    assert isinstance(err, NonRetryableError) and err.table == "t" and err.mode == "exact"
    assert err.expected == ("id: int64", "region: string", "n: int32")
    assert err.found == ("wrong types ['n: int64 (table: int32)']",)
    message = str(err)
    assert "upsert input does not match the schema of table 't'" in message
    assert "expected columns ['id: int64', 'region: string', 'n: int32'] (these types)" in message
    assert "found wrong types ['n: int64 (table: int32)']" in message
    assert "Help: cast or select the input to the table schema" in message


def test_castable_mode_names_types_without_a_cast(config: TableConfig) -> None:
    got = pa.schema(
        [("id", pa.int64()), ("region", pa.string()), ("n", pa.struct([("x", pa.int64())]))]
    )
    with pytest.raises(SchemaMismatchError) as info:
        check_input_schema(got, config, "insert", mode="castable")
    err = info.value
    assert err.mode == "castable"
    assert err.found == ("types that cannot be cast ['n: struct<x: int64> (table: int32)']",)
    assert "(types that cast to these)" in str(err)
    assert "Help: select and cast the DataFrame to the table schema" in str(err)


@pytest.mark.parametrize("mode", ["exact", "castable"])
def test_missing_extra_and_duplicate_columns(config: TableConfig, mode: SchemaMode) -> None:
    got = pa.schema([("id", pa.int64()), ("x", pa.string()), ("x", pa.string())])
    with pytest.raises(SchemaMismatchError) as info:
        check_input_schema(got, config, "insert", mode=mode)
    assert info.value.found == (
        "missing columns ['region', 'n']",
        "columns not in the table ['x', 'x']",
        "duplicate columns ['x']",
    )
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['region'\]"):
        check_input_schema(pa.schema([("id", pa.int64())]), config, "delete", mode=mode)


def test_castability_of_types_and_values() -> None:
    assert castable(pa.int64(), pa.int32())  # a cast exists; values may still not fit
    assert castable(pa.string(), pa.int64())
    assert not castable(pa.struct([("x", pa.int64())]), pa.float64())
    assert values_fit(pa.array([1, 2**31 - 1]), pa.int32())
    assert not values_fit(pa.array([1, 2**31]), pa.int32())
    assert not values_fit(pa.array(["a"]), pa.int64())
    assert values_fit(pa.chunked_array([[1], [2]]), pa.int8())
