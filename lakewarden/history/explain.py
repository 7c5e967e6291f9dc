"""``explain``: a few sentences that answer "why is this instant in this state".

The sentences are built from the story alone (the events), so they say what the events
recorded, and say so when events that would tell are missing (retention, unreadable
messages) instead of guessing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from lakewarden.history.model import (
    Expiry,
    HeartbeatTrail,
    InstantStory,
    JobResult,
    Step,
    TableHistory,
)

# How a ``cancel_requested`` entry's reason names who asked (``table.cancel.cancel_reason``).
_CANCEL_REASON = re.compile(r"cancel requested by (?P<who>[^:]+): (?P<why>.*)", re.DOTALL)


def fmt_ms(ms: int | None) -> str:
    """Epoch milliseconds as ``2025-03-14T09:26:53.589Z`` ("?" when unknown)."""
    if ms is None:
        return "?"
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def explain(history: TableHistory, instant: str) -> list[str]:
    """Sentences explaining the state of ``instant``, most important first."""
    story = history.story(instant)
    if story is None:
        return [
            f"No event of table {history.table_id} names instant {instant}.",
            *_caveats(history),
        ]
    lines = [_headline(story)]
    terminal = story.steps[-1] if story.steps else None
    state = story.state
    if state == "completed" and terminal is not None:
        lines += _completed(history, story, terminal)
    elif state == "rolled_back" and terminal is not None:
        lines += _rolled_back(history, story, terminal)
    elif state in ("aborted", "cancel_requested"):
        lines += _cancelled(history, story)
    elif state in ("requested", "inflight"):
        lines += _pending(story)
    else:
        lines += _without_timeline(story)
    lines += _attempts(story)
    if story.error_records:
        lines.append(
            f"{story.error_records} failed record(s) of this instant went to the errors topic."
        )
    return lines + _caveats(history)


_UNHAPPY = ("rolled_back", "aborted", "cancel_requested")


def telling_instant(history: TableHistory) -> str | None:
    """The instant most worth explaining: the newest that was rolled back, aborted, asked to
    cancel or whose writer was declared dead; else the newest with failed records or a failed
    job commit; else the newest. None when no event names an instant."""
    stories = history.ordered()
    unhappy = [s for s in stories if s.state in _UNHAPPY or s.expiries]
    failing = [
        s
        for s in stories
        if s.error_records > 0 or any(r.status == "failed" for r in s.job_results)
    ]
    for found in (unhappy, failing, stories):
        if found:
            return found[-1].instant
    return None


def _headline(story: InstantStory) -> str:
    if not story.steps:
        return f"Instant {story.instant}: the timeline topic recorded no transition of it."
    path = " -> ".join(f"{s.transition} (seq {s.seq})" for s in story.steps)
    return f"Instant {story.instant} ({story.steps[0].action}) is {story.state}: {path}."


def _by(step: Step, history: TableHistory) -> str:
    text = f"by {step.actor} at {fmt_ms(step.wall_ms)}"
    if step.lock_token is None:
        return text + " without the table lock"
    text += f" holding lock token {step.lock_token}"
    grant = history.grant(step.lock_token)
    if grant is not None and grant.requested_ms is not None and grant.granted_ms is not None:
        waited = grant.granted_ms - grant.requested_ms
        text += f" (asked for by {grant.owner}, granted after {waited} ms)"
    return text


def _completed(history: TableHistory, story: InstantStory, step: Step) -> list[str]:
    lines = [f"Completed {_by(step, history)}."]
    committed = [r for r in story.job_results if r.status == "committed"]
    if committed:
        result = committed[-1]
        lines.append(
            f"Job {result.job_id} was committed by {result.committer} at {fmt_ms(result.event_ms)}."
        )
    failed = [r for r in story.job_results if r.status == "failed"]
    if failed:
        lines.append(
            f"Earlier, {len(failed)} job commit attempt(s) failed; "
            f"the last: {_failure(failed[-1])}."
        )
    return lines


def _rolled_back(history: TableHistory, story: InstantStory, step: Step) -> list[str]:
    reason = str(step.payload.get("reason") or "no reason recorded")
    expiry = story.expiries[-1] if story.expiries else None
    failed = [r for r in story.job_results if r.status == "failed"]
    by = f"Rolled back {_by(step, history)}; reason recorded: {reason}."
    if expiry is not None:
        return [_expiry_sentence("Rolled back because", expiry, _trail(story, expiry.owner)), by]
    if failed:
        cause = f"Rolled back because the job commit failed: {_failure(failed[-1])}."
        if failed[-1].error_type and failed[-1].error_type in reason:
            by = f"Rolled back {_by(step, history)}."  # the reason repeats the failure
        return [cause, by]
    return [by]  # the reason the appender recorded is all there is


def _expiry_sentence(lead: str, expiry: Expiry, trail: HeartbeatTrail | None) -> str:
    frontier = expiry.frontier_ms if expiry.frontier_ms is not None else expiry.detected_ms
    silent = frontier - expiry.last_seen_ms
    text = (
        f"{lead} writer {expiry.owner}'s heartbeat stopped at "
        f"{fmt_ms(expiry.last_seen_ms)} (broker time)"
    )
    if trail is not None and trail.interval_ms > 0:
        missed = silent // trail.interval_ms
        text += (
            f": {missed} beats missed (interval {trail.interval_ms} ms, "
            f"{trail.tolerable_misses} tolerated)"
        )
    text += (
        f"; {expiry.monitor} declared it dead at {fmt_ms(expiry.detected_ms)} after "
        f"{silent} ms of silence (tolerance {expiry.tolerance_ms} ms)."
    )
    if trail is not None and trail.beats:
        text += f" It had sent {trail.beats} beat(s) since {fmt_ms(trail.first_ms)}."
    return text


def _failure(result: JobResult) -> str:
    stage = result.failed_stage or "an unnamed stage"
    error = result.error_type or "an error"
    text = f"job {result.job_id} failed at job-commit stage {stage} with {error}"
    reason = failure_reason(result)
    if reason:
        text += f" ({reason})"
    return text


def failure_reason(result: JobResult) -> str:
    """The failure's reason without the error type it often starts with (said once)."""
    reason = result.reason or ""
    if result.error_type and reason.startswith(f"{result.error_type}: "):
        return reason[len(result.error_type) + 2 :]
    return reason


def _cancelled(history: TableHistory, story: InstantStory) -> list[str]:
    terminal = story.steps[-1]
    aborted = terminal.transition == "aborted"
    lead = "Aborted because cancel" if aborted else "Cancel"
    requests = [c for c in story.cancels if c.kind == "request"]
    marked = story.step("cancel_requested")
    why: str | None = None
    if requests:  # the cancel-manager's request events name requester and reason as fields
        first = requests[0]
        why = first.reason or "none given"
        lines = [
            f"{lead} was requested by {first.requester} at {fmt_ms(first.requested_ms)} "
            f"for reason: {why}."
        ]
    elif marked is not None:  # only the timeline tells: its cancel_requested entry
        why = str(marked.payload.get("reason") or "none recorded")
        asked = _CANCEL_REASON.fullmatch(why)
        by = f"by {asked['who']}" if asked else f"(entry appended by {marked.actor})"
        lines = [
            f"{lead} was requested {by} at {fmt_ms(marked.wall_ms)} for reason: "
            f"{asked['why'] if asked else why}."
        ]
    else:
        lines = []
    for cancel in story.cancels:
        if cancel.outcome == "refused":
            lines.append(
                f"A {cancel.kind} by {cancel.requester} was refused: {cancel.outcome_reason}."
            )
    verb = "Aborted" if aborted else "Cancel recorded"
    reason = terminal.payload.get("reason")
    said = reason is None or (marked is not None and reason == marked.payload.get("reason"))
    lines.append(f"{verb} {_by(terminal, history)}" + ("." if said else f"; reason: {reason}."))
    return lines


def _pending(story: InstantStory) -> list[str]:
    lines = ["It is still pending on the timeline topic."]
    for trail in story.heartbeats:
        if trail.final_ms is not None:
            lines.append(f"{trail.owner} stopped beating on purpose at {fmt_ms(trail.final_ms)}.")
        elif trail.last_ms is not None:
            lines.append(
                f"{trail.owner}'s last heartbeat was at {fmt_ms(trail.last_ms)} (broker time), "
                f"{trail.beats} beat(s) in all."
            )
    for expiry in story.expiries:
        lines.append(
            _expiry_sentence("Not rolled back yet, although", expiry, _trail(story, expiry.owner))
        )
    if not story.heartbeats:
        lines.append("No heartbeat of it was recorded.")
    return lines


def _without_timeline(story: InstantStory) -> list[str]:
    lines = ["Other events name it, but its timeline entries are not on the timeline topic."]
    lines += [f"Job commit: {_failure(r)}." for r in story.job_results if r.status == "failed"]
    lines += [_expiry_sentence("Declared dead:", e, _trail(story, e.owner)) for e in story.expiries]
    return lines


def _attempts(story: InstantStory) -> list[str]:
    if not story.attempts:
        return []
    accepted = [a for a in story.attempts if a.accepted]
    files = sum(a.file_count for a in accepted)
    return [
        f"{len(story.attempts)} task attempt(s) saved a manifest; {len(accepted)} were accepted "
        f"by the driver ({files} files)."
    ]


def _trail(story: InstantStory, owner: str) -> HeartbeatTrail | None:
    return next((t for t in story.heartbeats if t.owner == owner), None)


def _caveats(history: TableHistory) -> list[str]:
    lines = [
        f"Events are missing: {gap.topic} partition {gap.partition} no longer holds offsets "
        f"below {gap.low_offset} (retention)"
        + (
            f"; nothing older than {fmt_ms(gap.first_kept_ms)} is known."
            if gap.first_kept_ms
            else "."
        )
        for gap in history.gaps
    ]
    if history.unreadable:
        reasons = sorted({u.reason for u in history.unreadable})
        lines.append(
            f"{len(history.unreadable)} message(s) could not be read ({', '.join(reasons)}); "
            "the story may be incomplete."
        )
    return lines
