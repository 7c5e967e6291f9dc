"""``MicroBatchWriter``'s choices without Spark: which writer a stream's rows go through."""

from __future__ import annotations

from pathlib import Path

import pytest
from _spark_helpers import make_table

from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.spark._job import TableHandle
from lakewarden.spark._micro_batch import MicroBatchWriter, StageClock, StageTiming
from lakewarden.spark._options import InvalidOptionError, encode_settings
from lakewarden.testing import ManualClock


def _handle(tmp_path: Path, settings: Settings | None = None) -> tuple[str, str | None]:
    make_table(tmp_path / "table")
    encoded = encode_settings(settings) if settings is not None else None
    return str(tmp_path / "table"), encoded


def test_auto_takes_sparks_writer_where_it_can_run(tmp_path: Path) -> None:
    uri, encoded = _handle(tmp_path)
    writer = MicroBatchWriter(uri, settings_json=encoded)
    assert writer._native(TableHandle.open(uri, encoded))


@pytest.mark.parametrize("kind", ["auto", "python"])
def test_bad_records_for_the_error_table_keep_the_python_writer(tmp_path: Path, kind: str) -> None:
    uri, encoded = _handle(tmp_path)
    writer = MicroBatchWriter(uri, settings_json=encoded, ingest_errors=True, writer=kind)  # type: ignore[arg-type]
    assert not writer._native(TableHandle.open(uri, encoded))


def test_spark_writer_is_refused_with_the_reason_where_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(error_table=ErrorTableSettings(enabled=True))
    uri, encoded = _handle(tmp_path, settings)
    writer = MicroBatchWriter(uri, settings_json=encoded, writer="spark")
    with pytest.raises(InvalidOptionError, match="writer=spark cannot be used.*error table"):
        writer._native(TableHandle.open(uri, encoded))


def test_python_writer_is_taken_when_asked(tmp_path: Path) -> None:
    uri, encoded = _handle(tmp_path)
    writer = MicroBatchWriter(uri, settings_json=encoded, writer="python")
    assert not writer._native(TableHandle.open(uri, encoded))


def test_stage_clock_records_each_step_in_order_also_when_it_raises() -> None:
    clock = ManualClock()
    stages = StageClock(clock.monotonic)
    clock.advance(0.010)
    with stages.stage("open"):
        clock.advance(0.025)
    with pytest.raises(RuntimeError), stages.stage("spark_write"):
        clock.advance(0.5)
        raise RuntimeError("the write failed")
    clock.advance(0.005)
    assert stages.stages == [
        StageTiming("open", pytest.approx(10.0), pytest.approx(25.0)),
        StageTiming("spark_write", pytest.approx(35.0), pytest.approx(500.0)),
    ]
    assert stages.elapsed_ms() == pytest.approx(540.0)
