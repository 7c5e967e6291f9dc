"""Names and paths at the boundary (issue 17, "names that escape" and "raw errors").

A table name or topic never makes a folder outside its parent, a NUL is refused at create, a
300-character partition value is a named error (no OS error with a ``_temporary`` path), and
storage keys with ``..``, absolute paths, NUL or over-long segments never reach the disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.names import (
    InvalidNameError,
    check_table_name,
    check_topic_name,
    child_folder,
)
from lakewarden.settings import Settings
from lakewarden.storage import InvalidKeyError
from lakewarden.storage.local import LocalStorage
from lakewarden.table.bucket import PartitionValueTooLongError
from lakewarden.table.config import InvalidTableConfigError, TableConfig, parse_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.timeline import Timeline

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
ESCAPING = ["../../../x", "..", ".", "a/b", "a\\b", "a\x00b", "tab\there", "x" * 201]


@pytest.mark.parametrize("name", ESCAPING)
def test_table_name_that_escapes_is_refused_at_create(name: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidTableConfigError, match="invalid table name") as err:
        Table.create(
            str(tmp_path / "t"),
            name=name,
            record_key="id",
            schema=SCHEMA,
            coordinator=EmbeddedCoordinator(),
        )
    assert "Help:" in str(err.value)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("name", ["orders", "orders_errors", "Orders.v2-eu", "ü-tabelle"])
def test_ordinary_table_names_pass(name: str) -> None:
    assert check_table_name(name) == name


@pytest.mark.parametrize("topic", [*ESCAPING[:-1], "", "a b", "x" * 250, "tópico"])
def test_topic_that_kafka_would_refuse_is_refused(topic: str) -> None:
    with pytest.raises(InvalidNameError, match="invalid topic"):
        check_topic_name(topic)


def test_ingest_default_checkpoint_stays_in_the_state_folder(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from lakewarden.spark.ingest import IngestSpec, default_checkpoint

    settings = Settings(state_dir=tmp_path / "state")
    good = TableConfig.new(name="orders", record_key="id", schema=SCHEMA)
    path = default_checkpoint(settings, good, "orders.v1")
    assert path.is_relative_to((tmp_path / "state" / "ingest").resolve())
    with pytest.raises(InvalidNameError, match="invalid topic"):
        default_checkpoint(settings, good, "../../../x")
    # a table.json edited by hand is not checked at create: the checkpoint still refuses it
    forged = parse_config(
        good.model_dump_json().replace('"orders"', '"../../../x"').encode(), location="t"
    )
    assert forged.name == "../../../x"
    with pytest.raises(InvalidNameError, match="invalid table name"):
        default_checkpoint(settings, forged, "orders")
    with pytest.raises(InvalidNameError, match="invalid topic"):
        IngestSpec(topic="../x", table="t", bootstrap="b", checkpoint=tmp_path)


def test_a_symlinked_state_folder_cannot_lead_outside(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "state" / "orders-1")
    assert child_folder(tmp_path / "state", "x") == (tmp_path / "state" / "x").resolve()
    with pytest.raises(InvalidNameError, match="resolves outside"):
        child_folder(tmp_path / "state", "orders-1", "t")


def test_300_char_partition_value_is_a_named_error(tmp_path: Path) -> None:
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by=["p"],
        schema=SCHEMA,
        coordinator=EmbeddedCoordinator(),
    )
    with pytest.raises(PartitionValueTooLongError) as err:
        table.write(pa.table({"id": [1, 2], "p": ["x" * 300, "ok"]}), operation="insert")
    message = str(err.value)
    assert "'p'" in message and "300 characters" in message and "Help:" in message
    assert "_temporary" not in message and str(tmp_path) not in message
    assert Timeline(LocalStorage(str(tmp_path / "t"))).load().tail_seq == -1  # nothing began
    table.write(pa.table({"id": [1], "p": ["x" * 200]}), operation="insert")  # within limit


@pytest.mark.parametrize(
    "key",
    [
        "../outside",
        "a/../../outside",
        "/etc/passwd",
        "a/\x00/b",
        "a\\..\\b",
        "p=" + "x" * 300 + "/f.parquet",
        "p=" + "é" * 130 + "/f.parquet",  # 260 bytes in 130 characters
    ],
)
def test_keys_that_escape_or_overflow_never_reach_the_disk(key: str, tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "root"))
    for operation in (
        lambda: storage.write(key, b"x"),
        lambda: storage.write_if_absent(key, b"x"),
        lambda: storage.delete(key),
        lambda: storage.read(key),
    ):
        with pytest.raises(InvalidKeyError):
            operation()
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "root")]
    assert outside == [] and not any(p.is_file() for p in tmp_path.rglob("*"))
