"""The shared parts of the history commands: ``--since`` and the text of a history."""

from __future__ import annotations

import gc
from typing import Any

import click
import click.testing
import pytest
from _events import INSTANT, TABLE, beats, job_request, job_result, lock, transition

from lakewarden.cli._table_events import parse_since
from lakewarden.history import batch_mode, build_history, story_lines, table_lines
from lakewarden.table.instant import Instant


def test_since_takes_an_instant_time_or_an_iso_time_utc_by_default() -> None:
    assert parse_since(None) is None
    assert parse_since(INSTANT) == Instant.parse(INSTANT).epoch_ms
    assert parse_since("2025-11-23T12:00") == Instant.parse(INSTANT).epoch_ms
    assert parse_since("2025-11-23T13:00+01:00") == Instant.parse(INSTANT).epoch_ms
    with pytest.raises(click.BadParameter, match="neither an instant time"):
        parse_since("yesterday")


def test_the_text_history_has_a_line_per_event_oldest_first() -> None:
    history = build_history(
        TABLE,
        [
            *lock("acq-1", "writer-1", 7, asked=0, granted=12),
            transition(0, "requested", 20),
            *beats("writer-1", [0, 2], start=25),
            job_request(200, ["a-0"]),
            job_result(300, "failed", failed_stage="load", error_type="E", reason="E: gone"),
            transition(1, "rolled_back", 310, actor="jc", payload={"reason": "E: gone"}),
        ],
    )

    lines = story_lines(history, history.stories[INSTANT])

    assert lines[0] == f"instant {INSTANT}: rolled_back"
    texts = [line.split("  ", 2)[2] for line in lines[1:]]
    assert texts[0].startswith("lock token 7 granted to writer-1, asked at")
    assert texts[1] == "seq 0 requested by writer-1 (lock token 7)"
    assert "2 beat(s)" in texts[2] and "missing seqs [1]" in texts[2]
    assert texts[-2] == "job job-1 failed at stage load (E: gone) by job-committer-0"
    assert texts[-1] == "seq 1 rolled_back by jc (lock token 7)"
    assert table_lines(history)[0].startswith(f"table {TABLE}: 8 event(s), 1 instant(s)")


def test_batch_mode_pauses_the_cycle_collector_and_restores_it_as_it_was() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), batch_mode():
        assert not gc.isenabled()
        raise RuntimeError("the read failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with batch_mode():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_explain_reads_the_instants_window_unless_asked_for_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from lakewarden.cli import explain as explain_cli
    from lakewarden.history import EXPLAIN_LEAD_MS, EXPLAIN_TRAIL_MS

    asked: list[tuple[int | None, int | None]] = []
    terminal = Instant.parse(INSTANT).epoch_ms + 40_000  # completed 40 s after it started

    def history(
        settings: object,
        config: object,
        *,
        since: object,
        since_ms: int | None,
        until_ms: int | None,
    ) -> Any:
        asked.append((since_ms, until_ms))
        return build_history(TABLE, [transition(0, "requested", 20)])

    monkeypatch.setattr(explain_cli, "open_table", lambda uri, settings: (None, None))
    monkeypatch.setattr(explain_cli, "terminal_time_ms", lambda storage, instant: terminal)
    monkeypatch.setattr(explain_cli, "table_history", history)
    runner = CliRunner()

    windowed = runner.invoke(explain_cli.command, ["/t", INSTANT])
    everything = runner.invoke(explain_cli.command, ["/t", INSTANT, "--from-beginning"])
    monkeypatch.setattr(explain_cli, "terminal_time_ms", lambda storage, instant: None)
    pending = runner.invoke(explain_cli.command, ["/t", INSTANT])

    assert windowed.exit_code == 0 and everything.exit_code == 0, windowed.output
    assert pending.exit_code == 0, pending.output
    assert f"Instant {INSTANT} (commit) is requested" in windowed.output
    since = Instant.parse(INSTANT).epoch_ms - EXPLAIN_LEAD_MS
    assert asked == [(since, terminal + EXPLAIN_TRAIL_MS), (None, None), (since, None)]


def test_replay_prints_the_folds_instants_by_state_and_its_rejections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summary line and the rejections come from ``TopicReplay.summary()`` (no
    instant state built); the report's state, read afterwards, says the same."""
    from types import SimpleNamespace

    from lakewarden.cli import replay as replay_cli
    from lakewarden.history import Recorded, TopicReplay
    from lakewarden.history.lock_replay import LockReplayReport

    def record(seq: int, instant: str, step: str, payload: str) -> Recorded:
        fields = {"seq": seq, "instant": instant, "action": "commit", "transition": step}
        fields |= {"actor": "w", "lock_token": None, "wall_time": 0, "payload": payload}
        return Recorded("TimelineTransition", fields)

    ok = {"requested": '{"operation": "insert"}', "inflight": '{"operation": "insert"}'}
    ok["completed"] = '{"operation": "insert", "write_stats": []}'
    records = [record(s, INSTANT, t, ok[t]) for s, t in enumerate(ok)]
    records += [record(3, "20251123120000001", "requested", ok["requested"])]
    records += [record(4, "20251123120000001", "completed", '{"write_stats": 3}')]
    replays: list[TopicReplay] = []

    def fed(settings: object, table_id: str, replay: TopicReplay, **_: object) -> list[object]:
        replays.append(replay)
        for r in records:
            replay.feed(r)
        return []

    config = SimpleNamespace(name="orders", table_id=TABLE)
    monkeypatch.setattr(replay_cli, "open_table", lambda uri, settings: (None, config))
    monkeypatch.setattr(replay_cli, "replay_timeline", fed)
    monkeypatch.setattr(replay_cli, "read_storage_entries", lambda storage: {})
    monkeypatch.setattr(replay_cli, "_redrive", lambda s, c: LockReplayReport(0, 0, ()))

    result = click.testing.CliRunner().invoke(replay_cli.command, ["/t"])

    assert result.exit_code == 1, result.output  # storage lacks every entry
    assert "rebuilt instants: 1 completed, 1 requested\n" in result.output
    assert "seq 4 rejected by the state machine: " in result.output
    state = replays[0].state()
    assert sorted(str(i.state) for i in state.instants.values()) == ["completed", "requested"]
    assert [r.seq for r in state.rejected] == [4]
