"""``MicroBatchWriter``'s choices without Spark: which writer a stream's rows go through."""

from __future__ import annotations

from pathlib import Path

import pytest
from _spark_helpers import make_table

from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.spark._job import TableHandle
from lakewarden.spark._micro_batch import (
    SINGLE_TASK_ROWS,
    MicroBatchWriter,
    StageClock,
    StageTiming,
)
from lakewarden.spark._options import InvalidOptionError, encode_settings
from lakewarden.spark._stream_offsets import batch_records
from lakewarden.testing import ManualClock


def _handle(tmp_path: Path, settings: Settings | None = None) -> tuple[str, str | None]:
    make_table(tmp_path / "table")
    encoded = encode_settings(settings) if settings is not None else None
    return str(tmp_path / "table"), encoded


def test_auto_takes_the_python_tasks_where_sparks_writer_could_run_too(tmp_path: Path) -> None:
    uri, encoded = _handle(tmp_path)
    auto = MicroBatchWriter(uri, settings_json=encoded)
    assert not auto._native(TableHandle.open(uri, encoded))
    spark = MicroBatchWriter(uri, settings_json=encoded, writer="spark")
    assert spark._native(TableHandle.open(uri, encoded))


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


# -- small batches written by one task: the batch's records from the checkpoint's offsets -----

_CONF = '{"batchWatermarkMs":0,"batchTimestampMs":1795472515508,"conf":{}}'


def _offsets(checkpoint: Path, batch: int, offsets: str) -> None:
    """``offsets/<batch>`` as Structured Streaming writes it (version, metadata, the source)."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{_CONF}\n{offsets}")


def _initial(checkpoint: Path, offsets: str) -> None:
    """``sources/0/0``: the Kafka source's initial offsets, after the zero byte Spark writes."""
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + offsets.encode())


def test_a_batchs_records_are_its_offsets_since_the_previous_batch(tmp_path: Path) -> None:
    _initial(tmp_path, '{"orders":{"0":0,"1":5}}')
    _offsets(tmp_path, 0, '{"orders":{"1":105,"0":103}}')
    _offsets(tmp_path, 1, '{"orders":{"0":1103,"1":1105}}')
    assert batch_records(str(tmp_path), 0) == 203
    assert batch_records(str(tmp_path), 1) == 2000
    assert batch_records(str(tmp_path), 2) is None  # not planned yet


@pytest.mark.parametrize(
    ("previous", "current"),
    [
        ('{"logOffset":0}', '{"logOffset":1}'),  # a file source
        ('{"orders":{"0":10}}', '{"orders":{"0":12,"1":4}}'),  # a partition added since
        ('{"orders":{"0":10}}', '{"orders":{"0":3}}'),  # offsets went back (topic recreated)
        ('{"orders":{"0":10}}', '{"orders":{"0":"12"}}'),  # not an offset
        ('{"orders":{"0":10}}', '{"orders":{"0":12}}\n{"other":{"0":1}}'),  # two sources
        ('{"orders":{"0":10}}', "{not json"),
    ],
)
def test_a_checkpoint_that_cannot_tell_gives_no_count(
    tmp_path: Path, previous: str, current: str
) -> None:
    _offsets(tmp_path, 3, previous)
    _offsets(tmp_path, 4, current)
    assert batch_records(str(tmp_path), 4) is None
    assert batch_records(str(tmp_path / "missing"), 4) is None
    assert batch_records("", 4) is None


def test_one_task_below_the_threshold_from_the_offsets_else_the_cap(tmp_path: Path) -> None:
    _offsets(tmp_path, 6, '{"orders":{"0":0,"1":0}}')
    _offsets(tmp_path, 7, '{"orders":{"0":300,"1":200}}')
    writer = MicroBatchWriter("/t", checkpoint=str(tmp_path), single_task_rows=500)
    assert writer.one_task(7)  # 500 records: at the threshold
    assert not MicroBatchWriter("/t", checkpoint=str(tmp_path), single_task_rows=499).one_task(7)
    assert not MicroBatchWriter("/t", checkpoint=str(tmp_path), single_task_rows=0).one_task(7)
    # Batch 9's offsets cannot tell: the query's cap bounds it, and without one nothing does.
    capped = MicroBatchWriter(
        "/t", checkpoint=str(tmp_path), max_batch_rows=25, single_task_rows=500
    )
    assert capped.one_task(9)
    assert not MicroBatchWriter("/t", checkpoint=str(tmp_path), single_task_rows=500).one_task(9)
    assert not MicroBatchWriter("/t", max_batch_rows=501, single_task_rows=500).one_task(9)
    assert SINGLE_TASK_ROWS == 0  # the default: never (measured no faster, see _micro_batch)
    assert not MicroBatchWriter("/t", checkpoint=str(tmp_path)).one_task(7)
    with pytest.raises(InvalidOptionError, match="single_task_rows"):
        MicroBatchWriter("/t", single_task_rows=-1)
