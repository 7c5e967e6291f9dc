"""The chart as a PNG, drawn with matplotlib (Agg, no display, no pyplot global state).

plotly draws the HTML page; its PNG export needs kaleido, whose 1.x releases drive a Chrome
that they download on first use (not offline, not on CI's fresh machine) and whose 0.2 release
is deprecated by plotly and warns on import. matplotlib draws the same chart model with the
same bands, colours and markers. Times are seconds since the chart's first event (the axis
label names that moment), which reads better in a still image than dates would.
"""

from __future__ import annotations

from pathlib import Path

from lakewarden.extras import missing_extra
from lakewarden.history.chart import BANDS, BAR_COLOURS, MARK_STYLES, Chart
from lakewarden.history.explain import fmt_ms

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
except ImportError as err:
    raise missing_extra("chart", "The PNG chart", err) from err

_LANE_IN = 0.5
_DPI = 100


def render_png(chart: Chart, path: Path, *, width_in: float = 12.0) -> None:
    """Draw ``chart`` into the PNG file ``path``.

    Raises:
        OSError: the file cannot be written.
    """
    fig = Figure(figsize=(width_in, 1.8 + _LANE_IN * len(chart.lanes)), dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    start = chart.start_ms
    span = max(chart.end_ms - start, 1) / 1000

    def seconds(ms: int) -> float:
        return (ms - start) / 1000

    kinds_drawn: set[str] = set()
    for row, lane in enumerate(chart.lanes):
        for bar in lane.bars:
            offset, thickness = BANDS[bar.band]
            centre = -row - offset
            width = max(seconds(bar.end_ms) - seconds(bar.start_ms), 0.001)
            ax.broken_barh(
                [(seconds(bar.start_ms), width)],
                (centre - thickness / 2, thickness),
                facecolors=BAR_COLOURS[bar.kind],
                edgecolors="white",
                linewidth=0.8,
            )
            kinds_drawn.add(bar.kind)
            label = _fitting(bar.text, width / span * width_in * 10)
            if label:
                ax.text(
                    seconds(bar.start_ms) + width / 2,
                    centre,
                    label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
        for mark in lane.marks:
            colour, marker = MARK_STYLES[mark.kind]
            ax.plot(
                [seconds(mark.at_ms)],
                [-row],
                marker=marker,
                color=colour,
                markersize=9,
                markeredgewidth=2,
                linestyle="none",
            )
            kinds_drawn.add(mark.kind)
    ax.set_yticks([-row for row in range(len(chart.lanes))])
    ax.set_yticklabels([lane.label for lane in chart.lanes], fontsize=8)
    ax.set_ylim(-len(chart.lanes) + 0.4, 0.6)
    ax.set_xlabel(f"seconds since {fmt_ms(start)} (UTC)")
    ax.set_title(chart.title, fontsize=10)
    ax.grid(axis="x", color="#dddddd")
    ax.set_axisbelow(True)
    ax.legend(
        handles=_legend(kinds_drawn),
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(str(path), format="png")


def _fitting(text: str, room: float) -> str:
    """``text`` when its bar has ``room`` for it (in characters of the 7 pt font, about ten
    per inch of figure), its last word (a token's number) when it has room for that, else
    nothing: the hover of the HTML page has it."""
    if not text:
        return ""
    if room >= len(text) + 1:
        return text
    last = text.split()[-1]
    return last if room >= len(last) + 1 else ""


def _legend(kinds: set[str]) -> list[Patch | Line2D]:
    handles: list[Patch | Line2D] = [
        Patch(color=colour, label=kind.replace("_", " "))
        for kind, colour in BAR_COLOURS.items()
        if kind in kinds
    ]
    handles += [
        Line2D([], [], marker=marker, color=colour, linestyle="none", label=kind.replace("_", " "))
        for kind, (colour, marker) in MARK_STYLES.items()
        if kind in kinds
    ]
    return handles


__all__ = ["render_png"]
