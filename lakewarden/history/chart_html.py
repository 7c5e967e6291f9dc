"""The chart as a plotly figure and a self-contained HTML page (plotly.js embedded: the page
opens without network access).

Lane ``i`` (top to bottom) sits at y = ``-i``; each kind of bar is one horizontal ``Bar``
trace and each kind of mark one ``Scatter`` trace, so the legend names the kinds and clicking
one hides it. Times are drawn on a date axis (UTC); the hover text is the chart model's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakewarden.extras import missing_extra
from lakewarden.history.chart import (
    BANDS,
    BAR_COLOURS,
    MARK_STYLES,
    Bar,
    BarKind,
    Chart,
    Mark,
    MarkKind,
)

try:
    import plotly.graph_objects as go
except ImportError as err:
    raise missing_extra("chart", "The HTML chart", err) from err

# matplotlib marker -> plotly symbol, so both renderers draw one mark alike.
_SYMBOLS = {"o": "circle", "x": "x-thin-open", "^": "triangle-up", "D": "diamond", "s": "square"}
_LANE_PX = 42


def figure(chart: Chart) -> Any:
    """The plotly figure of ``chart`` (a ``plotly.graph_objects.Figure``)."""
    fig = go.Figure()
    bars: dict[BarKind, list[tuple[int, Bar]]] = {}
    marks: dict[MarkKind, list[tuple[int, Mark]]] = {}
    for row, lane in enumerate(chart.lanes):
        for bar in lane.bars:
            bars.setdefault(bar.kind, []).append((row, bar))
        for mark in lane.marks:
            marks.setdefault(mark.kind, []).append((row, mark))
    for kind, placed in bars.items():
        offsets = [BANDS[b.band] for _, b in placed]
        fig.add_trace(
            go.Bar(
                name=kind.replace("_", " "),
                orientation="h",
                base=[_when(b.start_ms) for _, b in placed],
                x=[max(b.end_ms - b.start_ms, 1) for _, b in placed],
                y=[-row - offset for (row, _), (offset, _) in zip(placed, offsets, strict=True)],
                width=[thickness for _, thickness in offsets],
                marker={"color": BAR_COLOURS[kind], "line": {"color": "white", "width": 1}},
                text=[b.text for _, b in placed],
                textposition="inside",
                insidetextanchor="middle",
                hovertext=[b.hover for _, b in placed],
                hoverinfo="text",
            )
        )
    for mark_kind, placed_marks in marks.items():
        colour, marker = MARK_STYLES[mark_kind]
        fig.add_trace(
            go.Scatter(
                name=mark_kind.replace("_", " "),
                mode="markers",
                x=[_when(m.at_ms) for _, m in placed_marks],
                y=[-row for row, _ in placed_marks],
                marker={
                    "color": colour,
                    "symbol": _SYMBOLS[marker],
                    "size": 13,
                    "line": {"width": 2, "color": colour},
                },
                hovertext=[m.hover for _, m in placed_marks],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title=chart.title,
        barmode="overlay",
        uniformtext={"minsize": 8, "mode": "hide"},  # a token that does not fit: hover only
        height=160 + _LANE_PX * len(chart.lanes),
        xaxis={"type": "date", "title": "time (UTC)"},
        yaxis={
            "tickvals": [-row for row in range(len(chart.lanes))],
            "ticktext": [lane.label for lane in chart.lanes],
            "range": [-len(chart.lanes) + 0.4, 0.6],
        },
        legend={"orientation": "h", "y": -0.15},
        margin={"l": 20, "r": 20, "t": 60, "b": 40},
        template="plotly_white",
    )
    return fig


def write_html(chart: Chart, path: Path) -> None:
    """Write ``chart`` to ``path`` as one HTML page with plotly.js inside it.

    Raises:
        OSError: the file cannot be written.
    """
    figure(chart).write_html(str(path), include_plotlyjs=True, full_html=True)


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


__all__ = ["figure", "write_html"]
