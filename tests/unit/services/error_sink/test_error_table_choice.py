"""Local or global error table per table (RFC-20 lets each writer choose): the choice in the
table's config and in a write's options, carried in the ``ErrorRecord`` context, and one
error-sink committing records of tables of both kinds where their writers chose."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _error_sink_messages import TOPIC, FakeMessage

from lakewarden.api.table import Table
from lakewarden.errortable import error_table_location
from lakewarden.errortable.location import chosen_location
from lakewarden.errortable.testing import FakeWrite
from lakewarden.events import encode
from lakewarden.settings import ErrorTableSettings, KafkaSettings, Settings
from lakewarden.table import EmbeddedCoordinator
from lakewarden.table.config import (
    ErrorTableChoice,
    InvalidTableConfigError,
    TableConfig,
    load_config,
)
from lakewarden_services.error_sink.sink import ErrorSink, SinkOptions

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("qty", pa.int64())])
LOCAL, GLOBAL = ErrorTableChoice(kind="local"), ErrorTableChoice(kind="global")


def test_the_write_then_the_table_then_the_settings_decide() -> None:
    default = ErrorTableSettings()
    glob = ErrorTableSettings(name="all_errors", base_path="/lake")
    assert error_table_location("/d/orders", "orders", default).uri == "/d/orders_errors"
    assert error_table_location("/d/orders", "orders", glob).uri == "/lake/all_errors"
    # the table's choice beats the settings; its unset fields take the settings'
    assert error_table_location("/d/orders", "orders", glob, None, LOCAL).uri == (
        "/d/orders_errors"
    )
    assert error_table_location("/d/orders", "orders", default, None, GLOBAL).uri == (
        "/d/lakewarden_errors"
    )
    assert error_table_location("/d/orders", "orders", glob, None, GLOBAL).uri == (
        "/lake/all_errors"
    )
    # the write's choice beats the table's
    mine = ErrorTableChoice(kind="global", name="e", base_path="/x")
    assert error_table_location("/d/orders", "orders", default, mine, LOCAL).uri == "/x/e"
    suffixed = ErrorTableChoice(kind="local", suffix="_bad")
    where = error_table_location("/d/orders", "orders", glob, suffixed)
    assert (where.uri, where.name) == ("/d/orders_bad", "orders_bad")


def test_a_choice_names_only_the_fields_of_its_kind() -> None:
    with pytest.raises(ValueError, match="local error table has no name"):
        ErrorTableChoice(kind="local", name="x")
    with pytest.raises(ValueError, match="global error table has no suffix"):
        ErrorTableChoice(kind="global", suffix="_x")


def test_the_choice_is_recorded_in_the_table_config(tmp_path: Path) -> None:
    table = Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        error_table="global",
    )
    assert load_config(table.storage).error_table == GLOBAL
    plain = Table.create(str(tmp_path / "plain"), name="plain", record_key="id", schema=SCHEMA)
    raw = json.loads(plain.storage.read(".lakewarden/table.json"))
    assert "error_table" not in raw  # as before the field: older readers still open it
    assert load_config(plain.storage).error_table is None
    with pytest.raises(InvalidTableConfigError, match="error_table"):
        TableConfig.new(
            name="x",
            record_key="id",
            schema=SCHEMA,
            error_table={"kind": "nowhere"},  # type: ignore[arg-type]
        )


def test_a_chosen_location_travels_in_the_context_and_none_leaves_it_to_the_sink(
    tmp_path: Path,
) -> None:
    settings = Settings()
    chosen = Table.create(
        str(tmp_path / "a"), name="a", record_key="id", schema=SCHEMA, error_table="global"
    )
    plain = Table.create(str(tmp_path / "b"), name="b", record_key="id", schema=SCHEMA)
    parent = chosen.uri.rsplit("/", 1)[0]
    assert chosen_location(chosen.uri, chosen.config, settings) == {
        "errorTableUri": f"{parent}/lakewarden_errors",
        "errorTableName": "lakewarden_errors",
    }
    assert chosen_location(plain.uri, plain.config, settings) == {}
    assert chosen_location(plain.uri, plain.config, settings, LOCAL)["errorTableName"] == (
        "b_errors"
    )


def test_python_writes_follow_the_tables_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    table = Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        error_table=ErrorTableChoice(kind="global", name="shared"),
    )
    batch = pa.table({"id": ["a", None], "qty": [1, 2]}, schema=SCHEMA)
    result = table.write(batch, "insert", bad_records="error-table")
    shared = Table.open(table.uri.rsplit("/", 1)[0] + "/shared")
    [row] = shared.read().to_pylist()
    assert row["source_instant"] == result.instant and row["source_table"] == "orders"
    assert dict(row["context"])["errorTableName"] == "shared"
    assert not (tmp_path / "orders_errors").exists()


class _Sink:
    def __init__(self, state_dir: Path) -> None:
        # The sink's own settings say: global, into <base>/sink_errors.
        settings = Settings(
            kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"),
            state_dir=state_dir,
            error_table=ErrorTableSettings(enabled=True, name="sink_errors"),
        )
        options = SinkOptions(
            errors_topic=TOPIC, dlq_topic="lakewarden.dlq", group_id="g", hints=False
        )
        self.sink = ErrorSink(settings, options, coordinator=EmbeddedCoordinator())
        self.sink._assigned = {0}
        consumer: Any = self.sink.consumer
        consumer.watermarks = lambda topic, partition, timeout_s: (0, 0)
        consumer.dead_letter = lambda msg, why: pytest.fail(f"dead-lettered: {why}")
        self.offset = 0

    def feed(self, event: dict[str, Any]) -> None:
        self.sink._handle(FakeMessage(encode("ErrorRecord", event), self.offset))  # type: ignore[arg-type]
        self.offset += 1


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[_Sink]:
    s = _Sink(tmp_path / "state")
    yield s
    s.sink.consumer.close()


def test_one_sink_serves_local_and_global_tables(sink: _Sink, tmp_path: Path) -> None:
    local = Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        error_table="local",
    )
    glob = Table.create(
        str(tmp_path / "trips"),
        name="trips",
        record_key="id",
        schema=SCHEMA,
        error_table=ErrorTableChoice(kind="global", name="shared"),
    )
    plain = Table.create(str(tmp_path / "users"), name="users", record_key="id", schema=SCHEMA)
    for table, keys in ((local, ["o1", "o2"]), (glob, ["t1"]), (plain, ["u1"])):
        write = FakeWrite(table)
        attempt = write.attempt(0)
        for event in write.errors(attempt, keys):
            sink.feed(event)
        write.complete([attempt])
    sink.sink.check()

    def ids(path: Path) -> list[str]:
        records = Table.open(str(path)).read().column("record").to_pylist()
        return sorted(json.loads(r)["id"] for r in records)

    assert ids(tmp_path / "orders_errors") == ["o1", "o2"]  # the table chose local
    assert ids(tmp_path / "shared") == ["t1"]  # the table chose global "shared"
    assert ids(tmp_path / "sink_errors") == ["u1"]  # no choice: the sink's settings
