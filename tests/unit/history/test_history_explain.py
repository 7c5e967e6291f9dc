"""explain: each cause of an instant's state is named, from hand-built event sequences."""

from __future__ import annotations

from _events import (
    INSTANT,
    T0,
    TABLE,
    beats,
    event,
    expired,
    job_request,
    job_result,
    lock,
    manifest,
    transition,
)

from lakewarden.events import default_codec, make_event
from lakewarden.history import (
    RetentionGap,
    Unreadable,
    build_history,
    explain,
    fmt_ms,
    telling_instant,
)
from lakewarden.history.reader import decode_message


def _explain(events: list[object]) -> str:
    return "\n".join(explain(build_history(TABLE, events), INSTANT))  # type: ignore[arg-type]


def test_completed_names_the_actor_the_token_and_the_lock_wait() -> None:
    text = _explain(
        [
            *lock("acq-8", "job-committer-0", 8, asked=250, granted=262),
            transition(0, "requested", 20),
            transition(1, "inflight", 30),
            manifest("attempt-0", "task-0", 100, files=3),
            job_request(200, ["attempt-0"]),
            job_result(300, "committed"),
            transition(2, "completed", 290, actor="job-committer-0", token=8),
        ]
    )

    assert f"Instant {INSTANT} (commit) is completed" in text
    assert "Completed by job-committer-0" in text
    assert "holding lock token 8 (asked for by job-committer-0, granted after 12 ms)" in text
    assert "Job job-1 was committed by job-committer-0" in text
    assert "1 task attempt(s) saved a manifest; 1 were accepted by the driver (3 files)" in text


def test_rolled_back_after_a_heartbeat_expiry_names_the_writer_the_time_and_missed_beats() -> None:
    text = _explain(
        [
            transition(0, "requested", 0),
            transition(1, "inflight", 10),
            *beats("writer-1", [0, 1, 2]),  # last beat at T0 + 2000
            expired("writer-1", last_seen=2000, detected=5200),
            transition(2, "rolled_back", 5300, actor="cleaner-0", payload={"reason": "dead"}),
        ]
    )

    assert (
        f"Rolled back because writer writer-1's heartbeat stopped at {fmt_ms(T0 + 2000)} "
        "(broker time): 3 beats missed (interval 1000 ms, 3 tolerated)"
    ) in text
    assert f"heartbeat-monitor-0 declared it dead at {fmt_ms(T0 + 5200)}" in text
    assert "Rolled back by cleaner-0" in text
    assert "reason recorded: dead" in text


def test_rolled_back_after_a_failed_job_commit_names_the_stage_and_the_error() -> None:
    text = _explain(
        [
            transition(0, "requested", 0),
            transition(1, "inflight", 10),
            job_request(200, ["attempt-0"]),
            job_result(
                300,
                "failed",
                failed_stage="commit_files",
                error_type="StorageIOError",
                reason="rename of part-0 failed",
            ),
            transition(2, "rolled_back", 310, actor="job-committer-0", payload={"reason": "x"}),
        ]
    )

    assert (
        "Rolled back because the job commit failed: job job-1 failed at job-commit stage "
        "commit_files with StorageIOError (rename of part-0 failed)."
    ) in text


def test_aborted_names_who_asked_to_cancel_and_why() -> None:
    cancel = {"instant": INSTANT, "requester": "ops-alice"}
    text = _explain(
        [
            transition(0, "requested", 0, action="compaction"),
            event(
                "CancelRequest", 40, request_id="c-1", kind="request", reason="too slow", **cancel
            ),
            event(
                "CancelResult", 45, request_id="c-1", instant=INSTANT, outcome="cancel_requested"
            ),
            transition(
                1,
                "cancel_requested",
                44,
                action="compaction",
                actor="cancel-manager",
                payload={"reason": "too slow"},
            ),
            event("CancelRequest", 50, request_id="c-2", kind="execute", **cancel),
            transition(
                2,
                "aborted",
                60,
                action="compaction",
                actor="cancel-manager",
                payload={"reason": "too slow"},
            ),
        ]
    )

    assert (
        f"Aborted because cancel was requested by ops-alice at {fmt_ms(T0 + 40)} "
        "for reason: too slow."
    ) in text
    assert "Aborted by cancel-manager" in text


def test_a_pending_instant_shows_its_last_heartbeat() -> None:
    text = _explain([transition(0, "requested", 0), *beats("writer-1", [0, 1])])

    assert "still pending" in text
    assert f"writer-1's last heartbeat was at {fmt_ms(T0 + 1000)} (broker time)" in text


def test_an_unknown_instant_and_missing_events_are_said_not_guessed() -> None:
    history = build_history(
        TABLE,
        [
            RetentionGap("lakewarden.heartbeats", 2, 1500, T0),
            Unreadable("lakewarden.timeline", 2, 8, "unknown_fingerprint"),
        ],
    )

    lines = explain(history, INSTANT)

    assert lines[0] == f"No event of table {TABLE} names instant {INSTANT}."
    assert (
        "Events are missing: lakewarden.heartbeats partition 2 no longer holds offsets below "
        f"1500 (retention); nothing older than {fmt_ms(T0)} is known."
    ) in lines
    assert "1 message(s) could not be read (unknown_fingerprint)" in lines[-1]


def test_a_message_of_an_unknown_schema_version_is_reported_not_fatal() -> None:
    codec = default_codec()
    record = make_event(
        "TimelineTransition",
        table_id=TABLE,
        producer_id="t",
        seq=0,
        instant=INSTANT,
        action="commit",
        transition="requested",
        actor="w",
        lock_token=None,
        wall_time=T0,
    )
    good = codec.encode("TimelineTransition", record)
    newer = good[:2] + bytes(8) + good[10:]  # a writer schema this process does not know

    bad = decode_message(newer, TABLE.encode(), table_id=TABLE, codec=codec, offset=4)
    ok = decode_message(good, TABLE.encode(), table_id=TABLE, codec=codec, offset=5)
    someone_elses = decode_message(b"junk", b"other-table", table_id=TABLE, codec=codec)

    assert isinstance(bad, Unreadable)
    assert (bad.reason, bad.offset) == ("unknown_fingerprint", 4)
    assert ok is not None and not isinstance(ok, Unreadable)
    assert someone_elses is None
    history = build_history(TABLE, [bad, ok])
    assert history.stories[INSTANT].state == "requested"
    assert "could not be read (unknown_fingerprint)" in explain(history, INSTANT)[-1]


def test_an_expired_but_pending_instant_is_not_called_rolled_back() -> None:
    text = _explain(
        [
            transition(0, "requested", 0),
            *beats("writer-1", [0, 1, 2]),
            expired("writer-1", last_seen=2000, detected=5200),
        ]
    )

    assert "Rolled back" not in text
    assert "Not rolled back yet, although writer writer-1's heartbeat stopped at" in text


def test_aborted_names_the_requester_and_reason_from_the_timeline_when_no_cancel_event() -> None:
    # table.cancel.request_cancel records who asked in the cancel_requested entry's reason.
    why = {"version": 2, "reason": "cancel requested by ops-bob: blocks the nightly load"}
    text = _explain(
        [
            transition(0, "requested", 0, action="clustering"),
            transition(1, "cancel_requested", 40, action="clustering", actor="cli", payload=why),
            transition(2, "aborted", 90, action="clustering", actor="executor-2", payload=why),
        ]
    )

    assert (
        f"Aborted because cancel was requested by ops-bob at {fmt_ms(T0 + 40)} for reason: "
        "blocks the nightly load."
    ) in text
    assert text.endswith(f"Aborted by executor-2 at {fmt_ms(T0 + 90)} holding lock token 7.")


def test_the_telling_instant_is_the_newest_unhappy_one_else_a_failing_one_else_the_newest() -> None:
    later, last = "20251123120001000", "20251123120002000"
    happy = [
        transition(0, "requested", 0),
        transition(1, "completed", 5),
        transition(2, "requested", 10, instant=later),
        transition(3, "completed", 15, instant=later),
    ]
    failed = event(
        "JobCommitResult", 20, instant=later, job_id="j", status="failed", failed_stage="load"
    )
    undone = transition(4, "rolled_back", 30, payload={"reason": "x"})
    newest = transition(5, "requested", 40, instant=last)

    assert telling_instant(build_history(TABLE, [])) is None
    assert telling_instant(build_history(TABLE, [*happy, newest])) == last
    assert telling_instant(build_history(TABLE, [*happy, failed, newest])) == later
    assert telling_instant(build_history(TABLE, [*happy, failed, undone, newest])) == INSTANT
    dead = expired("writer-1", last_seen=35, detected=45, instant=last)
    assert telling_instant(build_history(TABLE, [*happy, failed, undone, newest, dead])) == last
