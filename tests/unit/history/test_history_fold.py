"""The fold: hand-built event sequences in, the story of each instant out (no Kafka)."""

from __future__ import annotations

from _events import (
    INSTANT,
    OTHER,
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

from lakewarden.history import Recorded, RetentionGap, Unreadable, build_history


def test_a_completed_write_tells_lock_heartbeats_manifests_job_and_transitions() -> None:
    events = [
        *lock("acq-1", "writer-1", 7, asked=0, granted=12),
        transition(0, "requested", 20),
        transition(1, "inflight", 30),
        *beats("writer-1", [0, 1, 2, 3]),
        manifest("attempt-0a", "task-0", 100),
        manifest("attempt-0b", "task-0", 110),  # a retry of task 0
        manifest("attempt-1a", "task-1", 120),
        job_request(200, ["attempt-0b", "attempt-1a"]),
        job_result(300, "committed"),
        transition(2, "completed", 290, actor="job-committer-0", token=8),
    ]

    history = build_history(TABLE, events)

    story = history.story(INSTANT)
    assert story is not None
    assert story.state == "completed"
    assert [s.transition for s in story.steps] == ["requested", "inflight", "completed"]
    assert story.steps[2].actor == "job-committer-0"
    grant = history.grant(7)
    assert grant is not None
    assert (grant.owner, grant.requested_ms, grant.granted_ms) == ("writer-1", T0, T0 + 12)
    (trail,) = story.heartbeats
    assert (trail.beats, trail.first_ms, trail.last_ms) == (4, T0, T0 + 3000)
    assert trail.missing_seqs == ()
    accepted = {a.task_attempt_id: a.accepted for a in story.attempts}
    assert accepted == {"attempt-0a": False, "attempt-0b": True, "attempt-1a": True}
    assert [r.status for r in story.job_results] == ["committed"]
    assert history.events == len(events)


def test_heartbeat_gaps_show_as_missing_seqs_and_the_longest_silence() -> None:
    history = build_history(TABLE, beats("writer-1", [0, 1, 4, 5]))

    (trail,) = history.stories[INSTANT].heartbeats
    assert trail.missing_seqs == (2, 3)
    assert trail.longest_gap_ms == 3000  # broker time between seq 1 and seq 4


def test_an_expiry_is_kept_once_however_often_it_is_redelivered() -> None:
    death = expired("writer-1", last_seen=2000, detected=5100)

    history = build_history(TABLE, [death, death])

    (expiry,) = history.stories[INSTANT].expiries
    assert (expiry.owner, expiry.last_seen_ms, expiry.monitor) == (
        "writer-1",
        T0 + 2000,
        "heartbeat-monitor-0",
    )


def test_a_redelivered_transition_counts_once() -> None:
    step = transition(0, "requested", 10)

    history = build_history(TABLE, [step, step])

    assert len(history.stories[INSTANT].steps) == 1


def test_cancel_requests_are_paired_with_their_results_by_request_id() -> None:
    events = [
        event(
            "CancelResult", 50, request_id="c-1", instant=INSTANT, outcome="cancel_requested"
        ),  # the result may be read before the request (another topic)
        event(
            "CancelRequest",
            40,
            request_id="c-1",
            instant=INSTANT,
            kind="request",
            requester="ops-alice",
            reason="wrong input",
        ),
    ]

    (cancel,) = build_history(TABLE, events).stories[INSTANT].cancels

    assert (cancel.requester, cancel.reason, cancel.outcome) == (
        "ops-alice",
        "wrong input",
        "cancel_requested",
    )


def test_events_of_other_tables_are_ignored_and_dead_letters_of_this_one_are_kept() -> None:
    events = [
        transition(0, "requested", 10),
        event(
            "Heartbeat",
            20,
            table=OTHER,
            instant=INSTANT,
            owner="w",
            interval_ms=1000,
            seq=0,
            kind="beat",
            tolerable_misses=3,
        ),
        event(
            "DeadLetter",
            30,
            producer="heartbeat-monitor-0",
            topic="lakewarden.heartbeats",
            partition=2,
            offset=17,
            key=TABLE.encode(),
            value=b"\x00garbage",
            reason="bad_magic",
            detail="starts with 0067",
            error_type="EventDecodeError",
        ),
        event("ErrorRecord", 40, uid="u-1", ts="1763900000", context={"commitTime": INSTANT}),
    ]

    history = build_history(TABLE, events)

    assert history.stories[INSTANT].heartbeats == ()
    (letter,) = history.dead_letters
    assert (letter.topic, letter.offset, letter.reason) == (
        "lakewarden.heartbeats",
        17,
        "bad_magic",
    )
    assert history.error_records == 1
    assert history.stories[INSTANT].error_records == 1


def test_a_malformed_event_is_reported_and_the_fold_goes_on() -> None:
    bad = transition(1, "inflight", 20)
    bad.record["payload"] = "{not json"
    unreadable = Unreadable("lakewarden.timeline", 3, 99, "unknown_fingerprint", "newer schema")
    gap = RetentionGap("lakewarden.heartbeats", 3, 1200, T0)

    history = build_history(
        TABLE,
        [
            transition(0, "requested", 10),
            bad,
            unreadable,
            gap,
            transition(2, "rolled_back", 30, payload={"reason": "x"}),
        ],
    )

    assert [s.seq for s in history.stories[INSTANT].steps] == [0, 2]
    reasons = [(u.reason, u.offset) for u in history.unreadable]
    assert reasons == [("malformed_event", 20), ("unknown_fingerprint", 99)]
    assert "TimelineTransition: JSONDecodeError" in history.unreadable[0].detail
    assert history.gaps == (gap,)


def test_lock_replies_read_before_their_requests_pair_all_the_same() -> None:
    request, reply = lock("acq-1", "writer-1", 7, asked=0, granted=12)
    renew = event(
        "LockRequest",
        20,
        request_id="renew-1",
        kind="renew",
        owner="writer-1",
        ttl_ms=30_000,
        token=7,
        reply_topic="lakewarden.lock.replies",
    )
    renewed = event(
        "LockReply",
        21,
        producer="timeline-lock",
        request_id="renew-1",
        owner="writer-1",
        status="granted",
        token=7,
    )
    release = event(
        "LockRequest",
        40,
        request_id="rel-1",
        kind="release",
        owner="writer-1",
        ttl_ms=0,
        token=7,
        reply_topic="",
    )

    history = build_history(TABLE, [reply, renewed, release, request, renew])

    (grant,) = history.locks
    assert (grant.request_id, grant.token) == ("acq-1", 7)
    assert (grant.requested_ms, grant.granted_ms, grant.released_ms) == (T0, T0 + 12, T0 + 40)


def test_a_writers_registration_with_the_cleaner_is_no_problem_to_report() -> None:
    registration = event(
        "CleanRequest",
        5,
        table_uri="/data/t",
        policy=None,
        delete_orphans=False,
        requested_by="registration:writer-1",
    )
    history = build_history(TABLE, [registration, transition(0, "requested", 20)])
    assert history.unreadable == ()
    assert history.events == 2


def test_a_grant_withdrawn_by_a_client_that_stopped_waiting_ends_at_the_withdrawal() -> None:
    def withdraw(request_id: str, acquire_id: str, at: int) -> Recorded:
        return event(
            "LockRequest",
            at,
            request_id=request_id,
            kind="release",
            owner="writer-1",
            ttl_ms=0,
            acquire_id=acquire_id,
            reply_topic="",
        )

    queued_only = event(
        "LockRequest",
        1,
        request_id="acq-2",
        kind="acquire",
        owner="writer-1",
        ttl_ms=30_000,
        reply_topic="lakewarden.lock.replies",
    )
    events = [
        *lock("acq-1", "writer-1", 7, asked=0, granted=12),  # granted as the client gave up
        withdraw("rel-1", "acq-1", 15),
        queued_only,
        withdraw("rel-2", "acq-2", 16),  # withdrawn while queued: never held
    ]

    granted, never = build_history(TABLE, events).locks

    assert (granted.token, granted.released_ms) == (7, T0 + 15)
    assert (never.token, never.released_ms) == (None, None)
