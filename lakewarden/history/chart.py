"""A table's history as a chart: what to draw, decided once, drawn by two renderers.

``chart_of(history)`` is pure: it turns a ``TableHistory`` into lanes of bars and marks
(epoch ms, with the hover text a person reads). ``lakewarden.history.chart_html`` draws it
with plotly (a self-contained HTML page) and ``lakewarden.history.chart_png`` with matplotlib
(a PNG); both take the geometry (bands) and colours from here, so the page and the image
show the same thing.

Lanes, top to bottom:

- ``table lock``: every grant of the table lock, from grant to release or expiry, labelled
  with its token; a refused acquire is a mark.
- one lane per instant, oldest first: its phases as bars (requested -> inflight ->
  cancel_requested), the terminal transition as a mark (completed, rolled back, aborted);
  below them its heartbeats (first to last beat, in broker time), the longest gap between
  beats when it exceeded the interval by half, the silence before an expiry, the expiry
  itself; cancel requests and failed job commits as marks.

A pending instant's last phase runs to the newest event of the chart.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Literal

from lakewarden.history.explain import failure_reason, fmt_ms
from lakewarden.history.model import InstantStory, LockGrant, TableHistory

Band = Literal["phase", "beats"]
BarKind = Literal["requested", "inflight", "cancel_requested", "lock", "heartbeats", "gap"]
MarkKind = Literal[
    "completed", "rolled_back", "aborted", "expiry", "cancel", "job_failed", "lock_refused"
]

# Where a band sits in its lane (offset of its centre from the lane's, thickness), lane units.
BANDS: dict[Band, tuple[float, float]] = {"phase": (0.0, 0.5), "beats": (0.36, 0.14)}
BAR_COLOURS: dict[BarKind, str] = {
    "requested": "#9ecae1",
    "inflight": "#3182bd",
    "cancel_requested": "#fd8d3c",
    "lock": "#756bb1",
    "heartbeats": "#74c476",
    "gap": "#de2d26",
}
MARK_STYLES: dict[MarkKind, tuple[str, str]] = {  # colour, marker ("o", "x", "^", "D", "s")
    "completed": ("#238b45", "o"),
    "rolled_back": ("#cb181d", "s"),
    "aborted": ("#252525", "x"),
    "expiry": ("#a50f15", "x"),
    "cancel": ("#d94801", "^"),
    "job_failed": ("#67000d", "D"),
    "lock_refused": ("#54278f", "x"),
}
LOCK_LANE = "table lock"
PHASES: dict[str, BarKind] = {
    "requested": "requested",
    "inflight": "inflight",
    "cancel_requested": "cancel_requested",
}
TERMINAL: dict[str, MarkKind] = {
    "completed": "completed",
    "rolled_back": "rolled_back",
    "aborted": "aborted",
}


@dataclass(frozen=True, slots=True)
class Bar:
    start_ms: int
    end_ms: int
    kind: BarKind
    band: Band
    hover: str
    text: str = ""  # drawn on the bar (a lock token)


@dataclass(frozen=True, slots=True)
class Mark:
    at_ms: int
    kind: MarkKind
    hover: str


@dataclass(frozen=True, slots=True)
class Lane:
    label: str
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]


@dataclass(frozen=True, slots=True)
class Chart:
    """The lanes (top to bottom) and the time span they cover."""

    title: str
    lanes: tuple[Lane, ...]
    start_ms: int
    end_ms: int
    omitted: int  # older instants left out (``limit``)


def chart_of(history: TableHistory, *, limit: int | None = None) -> Chart:
    """The chart of ``history``: the lock lane, then the newest ``limit`` instants' lanes
    (all when None), oldest first. With instants left out, so are the lock holds that ended
    before the first instant drawn.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    stories = history.ordered()
    shown = stories if limit is None else stories[-limit:]
    end = _newest_ms(history)
    instant_lanes = [_instant_lane(s, end) for s in shown]
    omitted = len(stories) > len(shown)
    since = min((t for lane in instant_lanes for t in _times(lane)), default=0) if omitted else 0
    lanes = [_lock_lane(history.locks, since, end), *instant_lanes]
    times = [t for lane in lanes for t in _times(lane)]
    title = f"table {history.table_id}: {len(stories)} instant(s), {history.events} event(s)"
    if len(shown) < len(stories):
        title += f"; the newest {len(shown)} shown"
    return Chart(
        title=title,
        lanes=tuple(lanes),
        start_ms=min(times, default=0),
        end_ms=max(times, default=0),
        omitted=len(stories) - len(shown),
    )


def _lock_lane(grants: tuple[LockGrant, ...], since: int, end: int) -> Lane:
    bars: list[Bar] = []
    marks: list[Mark] = []
    # The lock is exclusive: a hold whose release the events miss ended by the next grant.
    starts = sorted(g.granted_ms for g in grants if g.granted_ms is not None)
    for grant in grants:
        if grant.refused is not None:
            at = grant.requested_ms if grant.requested_ms is not None else end
            if at >= since:
                hover = f"lock refused to {grant.owner}: {grant.refused}"
                marks.append(Mark(at, "lock_refused", hover))
            continue
        if grant.granted_ms is None or grant.token is None:
            continue  # asked for, never answered in the events read
        until, how = end, "still held at the newest event"
        later = bisect_right(starts, grant.granted_ms)
        if later < len(starts):
            until, how = starts[later], "ended (release not recorded) before the next grant"
        if grant.released_ms is not None:
            until, how = grant.released_ms, f"released at {fmt_ms(grant.released_ms)}"
        elif grant.expired_ms is not None:
            until, how = grant.expired_ms, f"lease expired at {fmt_ms(grant.expired_ms)}"
        asked = "" if grant.requested_ms is None else f", asked at {fmt_ms(grant.requested_ms)}"
        hover = (
            f"lock token {grant.token} held by {grant.owner}: granted at "
            f"{fmt_ms(grant.granted_ms)}{asked}; {how}"
        )
        if until >= since:  # holds before the first instant drawn are left out
            bars.append(
                Bar(grant.granted_ms, until, "lock", "phase", hover, f"token {grant.token}")
            )
    return Lane(LOCK_LANE, tuple(bars), tuple(marks))


def _instant_lane(story: InstantStory, end: int) -> Lane:
    bars: list[Bar] = []
    marks: list[Mark] = []
    steps = story.steps
    for step, after in zip(steps, [*steps[1:], None], strict=True):
        token = "" if step.lock_token is None else f", lock token {step.lock_token}"
        hover = f"seq {step.seq} {step.transition} at {fmt_ms(step.wall_ms)} by {step.actor}{token}"
        terminal, phase = TERMINAL.get(step.transition), PHASES.get(step.transition)
        if terminal is not None:
            reason = step.payload.get("reason")
            marks.append(Mark(step.wall_ms, terminal, hover + (f"; {reason}" if reason else "")))
        elif phase is not None:
            until = end if after is None else after.wall_ms
            bars.append(Bar(step.wall_ms, max(until, step.wall_ms), phase, "phase", hover))
    for trail in story.heartbeats:
        if trail.first_ms is not None and trail.last_ms is not None:
            hover = (
                f"heartbeats of {trail.owner}: {trail.beats} beat(s), every "
                f"{trail.interval_ms} ms, {fmt_ms(trail.first_ms)} to {fmt_ms(trail.last_ms)}"
            )
            bars.append(Bar(trail.first_ms, trail.last_ms, "heartbeats", "beats", hover))
            gap_from = trail.longest_gap_from_ms
            if gap_from is not None and trail.longest_gap_ms * 2 > trail.interval_ms * 3:
                hover = f"{trail.owner} silent for {trail.longest_gap_ms} ms between beats"
                bars.append(Bar(gap_from, gap_from + trail.longest_gap_ms, "gap", "beats", hover))
    for expiry in story.expiries:
        hover = (
            f"heartbeat of {expiry.owner} declared dead by {expiry.monitor} at "
            f"{fmt_ms(expiry.detected_ms)}: last beat {fmt_ms(expiry.last_seen_ms)}, "
            f"tolerance {expiry.tolerance_ms} ms"
        )
        if expiry.detected_ms > expiry.last_seen_ms:
            bars.append(Bar(expiry.last_seen_ms, expiry.detected_ms, "gap", "beats", hover))
        marks.append(Mark(expiry.detected_ms, "expiry", hover))
    for cancel in story.cancels:
        hover = f"cancel {cancel.kind} by {cancel.requester}: {cancel.reason or 'no reason'}"
        if cancel.outcome:
            hover += f"; {cancel.outcome}" + (
                f" ({cancel.outcome_reason})" if cancel.outcome_reason else ""
            )
        marks.append(Mark(cancel.requested_ms, "cancel", hover))
    for result in story.job_results:
        if result.status == "failed":
            hover = (
                f"job {result.job_id} failed at stage {result.failed_stage or '?'}: "
                f"{result.error_type or 'error'} {failure_reason(result)}".strip()
            )
            marks.append(Mark(result.event_ms, "job_failed", hover))
    action = steps[0].action if steps else "?"
    label = f"{story.instant} {action} ({story.state or 'no timeline entry'})"
    return Lane(label, tuple(bars), tuple(marks))


def _newest_ms(history: TableHistory) -> int:
    times: list[int] = []
    for story in history.stories.values():
        times += [s.wall_ms for s in story.steps]
        times += [t.last_ms for t in story.heartbeats if t.last_ms is not None]
        times += [e.detected_ms for e in story.expiries]
        times += [c.requested_ms for c in story.cancels]
        times += [r.event_ms for r in story.job_results]
    for grant in history.locks:
        times += [
            t
            for t in (grant.requested_ms, grant.granted_ms, grant.released_ms, grant.expired_ms)
            if t is not None
        ]
    return max(times, default=0)


def _times(lane: Lane) -> list[int]:
    return [t for b in lane.bars for t in (b.start_ms, b.end_ms)] + [m.at_ms for m in lane.marks]


__all__ = [
    "BANDS",
    "BAR_COLOURS",
    "LOCK_LANE",
    "MARK_STYLES",
    "Band",
    "Bar",
    "BarKind",
    "Chart",
    "Lane",
    "Mark",
    "MarkKind",
    "chart_of",
]
