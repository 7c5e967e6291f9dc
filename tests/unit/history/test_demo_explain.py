"""The demo's last step: ``lakewarden explain`` of the instant most worth explaining, printed
as the command prints it (the events are hand-built here; the demo test runs it for real)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _events import INSTANT, TABLE, beats, expired, transition

from lakewarden import demo
from lakewarden.api.table import Table
from lakewarden.history import build_history
from lakewarden.settings import Settings
from lakewarden.table.coordinator import EmbeddedCoordinator

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def test_the_step_explains_the_dead_writers_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=SCHEMA,
        coordinator=EmbeddedCoordinator(),
    )
    history = build_history(
        TABLE,
        [
            transition(0, "requested", 0),
            transition(1, "inflight", 10),
            *beats("demo-writer", [0, 1, 2]),
            expired("demo-writer", last_seen=2000, detected=5200),
            transition(2, "requested", 6000, instant="20251123120009000"),
            transition(3, "completed", 6100, instant="20251123120009000"),
        ],
    )
    monkeypatch.setattr("lakewarden._demo_show.table_history", lambda *_: history)
    run = demo.Demo(work=tmp_path, settings=Settings(), table=table, events=[], log_file=tmp_path)

    demo.step_explain(run)

    out = capsys.readouterr().out
    assert f"$ lakewarden explain {table.uri} {INSTANT}" in out
    assert "Not rolled back yet, although writer demo-writer's heartbeat stopped at" in out
    assert run.failures == []
