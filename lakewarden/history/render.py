"""The history as text (a line per event that matters, oldest first) or as JSON."""

from __future__ import annotations

import dataclasses
from typing import Any

from lakewarden.history.explain import failure_reason, fmt_ms
from lakewarden.history.model import InstantStory, TableHistory


def story_lines(history: TableHistory, story: InstantStory) -> list[str]:
    """The story of one instant: a heading, then one timestamped line per event."""
    timed: list[tuple[int, str]] = []
    for step in story.steps:
        token = "" if step.lock_token is None else f" (lock token {step.lock_token})"
        timed.append((step.wall_ms, f"seq {step.seq} {step.transition} by {step.actor}{token}"))
        grant = history.grant(step.lock_token)
        if grant is not None and grant.granted_ms is not None and step.transition == "requested":
            asked = f", asked at {fmt_ms(grant.requested_ms)}" if grant.requested_ms else ""
            timed.append(
                (grant.granted_ms, f"lock token {grant.token} granted to {grant.owner}{asked}")
            )
    for trail in story.heartbeats:
        if trail.first_ms is not None:
            missing = f", missing seqs {list(trail.missing_seqs)}" if trail.missing_seqs else ""
            timed.append(
                (
                    trail.first_ms,
                    f"heartbeats from {trail.owner}: {trail.beats} beat(s) until "
                    f"{fmt_ms(trail.last_ms)}, every {trail.interval_ms} ms, longest gap "
                    f"{trail.longest_gap_ms} ms{missing}",
                )
            )
        if trail.final_ms is not None:
            timed.append((trail.final_ms, f"{trail.owner} stopped beating (final)"))
    for expiry in story.expiries:
        timed.append(
            (
                expiry.detected_ms,
                f"heartbeat of {expiry.owner} expired (last seen {fmt_ms(expiry.last_seen_ms)}, "
                f"tolerance {expiry.tolerance_ms} ms) by {expiry.monitor}",
            )
        )
    for request in story.job_requests:
        timed.append(
            (
                request.event_ms,
                f"job {request.job_id} commit requested by {request.requester} with "
                f"{len(request.accepted)} accepted task attempt(s)",
            )
        )
    for result in story.job_results:
        outcome = result.status
        if result.status == "failed":
            outcome += (
                f" at stage {result.failed_stage} ({result.error_type}: {failure_reason(result)})"
            )
        timed.append((result.event_ms, f"job {result.job_id} {outcome} by {result.committer}"))
    for cancel in story.cancels:
        outcome = f" -> {cancel.outcome}" if cancel.outcome else ""
        why = f" for {cancel.reason}" if cancel.reason else ""
        timed.append(
            (cancel.requested_ms, f"cancel {cancel.kind} by {cancel.requester}{why}{outcome}")
        )
    timed.sort(key=lambda pair: pair[0])
    state = story.state or "not on the timeline topic"
    lines = [f"instant {story.instant}: {state}"]
    lines += [f"  {fmt_ms(at)}  {text}" for at, text in timed]
    for attempt in story.attempts:
        verdict = "accepted" if attempt.accepted else "not accepted"
        lines.append(
            f"  task attempt {attempt.task_attempt_id}: {attempt.file_count} file(s), "
            f"{attempt.total_bytes} bytes, {verdict}"
        )
    if story.error_records:
        lines.append(f"  {story.error_records} failed record(s)")
    return lines


def table_lines(history: TableHistory) -> list[str]:
    """What belongs to the table as a whole: counts, dead letters, unreadable messages, gaps."""
    lines = [
        f"table {history.table_id}: {history.events} event(s), {len(history.stories)} instant(s), "
        f"{len(history.locks)} lock acquire(s), {history.error_records} failed record(s)"
    ]
    for letter in history.dead_letters:
        lines.append(
            f"  dead letter from {letter.topic}[{letter.partition}]@{letter.offset}: "
            f"{letter.reason} {letter.detail}".rstrip()
        )
    for bad in history.unreadable:
        lines.append(
            f"  unreadable {bad.topic}[{bad.partition}]@{bad.offset}: {bad.reason} {bad.detail}"
        )
    for gap in history.gaps:
        lines.append(
            f"  missing: {gap.topic}[{gap.partition}] offsets below {gap.low_offset} were deleted "
            f"by retention (first kept event at {fmt_ms(gap.first_kept_ms)})"
        )
    return lines


def history_json(history: TableHistory, instant: str | None = None) -> dict[str, Any]:
    """The history as a JSON-ready dict (only ``instant``'s story when given)."""
    data = dataclasses.asdict(history)
    if instant is not None:
        data["stories"] = {k: v for k, v in data["stories"].items() if k == instant}
    return data
