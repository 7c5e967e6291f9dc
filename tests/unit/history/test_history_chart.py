"""The chart, checked as a person would look at it: lanes, bars, marks and hover text in the
model and the plotly figure; a PNG of the expected size with the lanes' colours in it; the
HTML page self-contained, and (when a headless Chromium is installed) rendered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from _events import (
    INSTANT,
    T0,
    TABLE,
    beats,
    event,
    expired,
    lock,
    transition,
)
from click.testing import CliRunner
from matplotlib.image import imread

from lakewarden.cli import cli
from lakewarden.history import TableHistory, build_history
from lakewarden.history.chart import BAR_COLOURS, LOCK_LANE, Chart, chart_of
from lakewarden.history.chart_html import figure, write_html
from lakewarden.history.chart_png import render_png

LATER = "20251123120001000"
CANCELLED = "20251123120002000"


def _history() -> TableHistory:
    """Three instants: one rolled back after its writer died, one completed after a failed
    job commit attempt, one aborted after a cancel request."""
    return build_history(
        TABLE,
        [
            *lock("acq-7", "writer-1", 7, asked=0, granted=5),
            transition(0, "requested", 10),
            transition(1, "inflight", 20),
            *beats("writer-1", [0, 1, 2, 5, 6], every=500, start=30),  # a 1.5 s hole
            expired("writer-1", last_seen=3030, detected=5000),
            transition(2, "rolled_back", 5100, actor="cleaner-0", payload={"reason": "dead"}),
            *lock("acq-8", "writer-2", 8, asked=5200, granted=5210),
            transition(3, "requested", 5220, instant=LATER, token=8),
            transition(4, "inflight", 5300, instant=LATER, token=8),
            event(
                "JobCommitResult",
                5500,
                producer="job-committer-0",
                instant=LATER,
                job_id="job-1",
                status="failed",
                failed_stage="load",
                error_type="E",
                reason="E: gone",
            ),
            transition(5, "completed", 6000, instant=LATER, token=8, actor="job-committer-0"),
            transition(6, "requested", 6100, instant=CANCELLED, action="clustering", token=None),
            event(
                "CancelRequest",
                6200,
                request_id="c-1",
                kind="request",
                instant=CANCELLED,
                requester="ops-alice",
                reason="too slow",
            ),
            transition(7, "cancel_requested", 6250, instant=CANCELLED, token=None),
            transition(8, "aborted", 6400, instant=CANCELLED, token=None),
        ],
    )


@pytest.fixture(scope="module")
def chart() -> Chart:
    return chart_of(_history())


def test_a_lane_per_instant_under_the_lock_lane_with_phases_and_terminal_marks(
    chart: Chart,
) -> None:
    labels = [lane.label for lane in chart.lanes]
    assert labels == [
        LOCK_LANE,
        f"{INSTANT} commit (rolled_back)",
        f"{LATER} commit (completed)",
        f"{CANCELLED} clustering (aborted)",
    ]
    lock_lane, dead, done, cancelled = chart.lanes
    assert [b.text for b in lock_lane.bars] == ["token 7", "token 8"]
    assert "held by writer-1" in lock_lane.bars[0].hover
    assert [(b.kind, b.band) for b in dead.bars if b.band == "phase"] == [
        ("requested", "phase"),
        ("inflight", "phase"),
    ]
    assert [m.kind for m in dead.marks] == ["rolled_back", "expiry"]
    assert [m.kind for m in done.marks] == ["completed", "job_failed"]
    assert "failed at stage load: E gone" in done.marks[1].hover
    assert [b.kind for b in cancelled.bars] == ["requested", "cancel_requested"]
    assert [m.kind for m in cancelled.marks] == ["aborted", "cancel"]
    assert "ops-alice: too slow" in cancelled.marks[1].hover


def test_heartbeat_holes_and_the_silence_before_the_expiry_are_gaps(chart: Chart) -> None:
    dead = chart.lanes[1]
    drawn = [(b.kind, b.start_ms - T0, b.end_ms - T0) for b in dead.bars if b.band == "beats"]

    assert drawn == [("heartbeats", 30, 3030), ("gap", 1030, 2530), ("gap", 3030, 5000)]
    assert "silent for 1500 ms" in dead.bars[3].hover
    assert "declared dead by heartbeat-monitor-0" in dead.bars[4].hover


def test_a_pending_instant_runs_to_the_newest_event_and_limit_keeps_the_newest() -> None:
    history = build_history(TABLE, [transition(0, "requested", 10), *beats("w", [0, 1])])
    (pending,) = chart_of(history).lanes[1:]
    assert pending.bars[0].end_ms == T0 + 1000  # the last beat is the newest event

    shown = chart_of(_history(), limit=1)
    assert [lane.label for lane in shown.lanes[1:]] == [f"{CANCELLED} clustering (aborted)"]
    assert shown.omitted == 2 and "the newest 1 shown" in shown.title
    with pytest.raises(ValueError, match="at least 1"):
        chart_of(history, limit=0)


def test_the_plotly_figure_has_a_trace_per_kind_with_hover_text_per_lane(chart: Chart) -> None:
    fig = figure(chart)
    traces = {t.name: t for t in fig.data}

    assert set(traces) >= {
        "requested",
        "inflight",
        "lock",
        "heartbeats",
        "gap",
        "completed",
        "rolled back",
        "aborted",
        "expiry",
        "cancel",
        "job failed",
    }
    assert list(traces["lock"].text) == ["token 7", "token 8"]
    assert list(traces["requested"].y) == [-1, -2, -3]  # one bar in each instant's lane
    assert all(text for t in fig.data for text in t.hovertext)
    assert list(fig.layout.yaxis.ticktext) == [lane.label for lane in chart.lanes]


def test_the_png_shows_the_lanes_in_their_colours(chart: Chart, tmp_path: Path) -> None:
    out = tmp_path / "history.png"
    render_png(chart, out, width_in=10.0)
    pixels = imread(str(out))  # float RGBA in [0, 1]

    assert pixels.shape[:2] == (round(100 * (1.8 + 0.5 * len(chart.lanes))), 1000)
    rgb = np.round(pixels[..., :3] * 255).astype(int)
    colours = {tuple(c) for c in rgb.reshape(-1, 3)}
    for kind in ("requested", "inflight", "lock", "heartbeats", "gap", "cancel_requested"):
        hex_colour = BAR_COLOURS[kind]
        wanted = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        share = np.mean(np.all(rgb == wanted, axis=-1))
        assert share > 0.0005, f"{kind} ({hex_colour}) is hardly drawn: {share:.5f}"
    assert len(colours) > 50  # text, markers and antialiasing: not a blank canvas


def test_the_html_page_is_self_contained_and_renders_in_headless_chromium(
    chart: Chart, tmp_path: Path
) -> None:
    page = tmp_path / "history.html"
    write_html(chart, page)
    html = page.read_text()

    assert "<script src=" not in html  # plotly.js is inside the page
    assert "token 7" in html and "ops-alice: too slow" in html
    browser = next(
        (
            shutil.which(b)
            for b in ("chromium", "chromium-browser", "google-chrome")
            if shutil.which(b)
        ),
        None,
    )
    if browser is None:
        pytest.skip("no headless Chromium here: the page was checked, not its screenshot")
    shot = tmp_path / "page.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,700",
            "--virtual-time-budget=5000",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    rgb = np.round(imread(str(shot))[..., :3] * 255).astype(int)
    blue = tuple(int(BAR_COLOURS["inflight"][i : i + 2], 16) for i in (1, 3, 5))
    assert np.any(np.all(rgb == blue, axis=-1)), "the page drew no inflight bar"


def test_the_chart_command_refuses_an_unknown_format_before_opening_the_table() -> None:
    result = CliRunner().invoke(cli, ["chart", "/nowhere", "--out", "history.svg"])
    assert result.exit_code == 2
    assert "ends in neither .html nor .png" in result.output
