"""The pure lock state of timeline-lock: every request kind, FIFO, tokens, replay, restart."""

from __future__ import annotations

from dataclasses import replace

import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.lock.state import (
    FINISHED_MEMORY,
    Holder,
    Outcome,
    Request,
    Route,
    TableLock,
    apply,
    due_expiry,
    effective_expiry_ms,
    expire_request,
    validate,
)
from lakewarden_services.timeline_lock.state_json import (
    due_expiry_json,
    lock_from_json,
    lock_to_json,
)

ROUTE = Route(2, "client-a")


def acquire(request_id: str, *, owner: str = "w", ttl_ms: int = 1000) -> Request:
    return Request("acquire", request_id, owner, ttl_ms, Route(1, f"client-{owner}"))


def renew(token: int, *, request_id: str = "r", ttl_ms: int = 1000) -> Request:
    return Request("renew", request_id, "w", ttl_ms, ROUTE, token=token)


def release(token: int | None, *, acquire_id: str | None = None) -> Request:
    return Request("release", "rel", "w", 0, ROUTE, token=token, acquire_id=acquire_id)


class Run:
    """Feeds requests at increasing offsets, like one partition of lock.requests."""

    def __init__(self, now_ms: int = 1_000) -> None:
        self.state = TableLock()
        self.offset = 0
        self.now_ms = now_ms

    def __call__(self, request: Request, *, now_ms: int | None = None) -> Outcome:
        now = self.now_ms if now_ms is None else now_ms
        outcome = apply(self.state, request, offset=self.offset, now_ms=now)
        self.offset += 1
        self.state = outcome.state
        return outcome


def statuses(outcome: Outcome) -> list[tuple[str, str, int | None]]:
    return [(r.request_id, r.status, r.token) for r in outcome.replies]


def test_acquire_on_a_free_lock_is_granted_with_token_1_and_a_deadline() -> None:
    run = Run(now_ms=5_000)
    out = run(acquire("a", ttl_ms=750))
    assert statuses(out) == [("a", "granted", 1)]
    assert out.replies[0].lease_expires_ms == 5_750
    assert out.replies[0].route == Route(1, "client-w")
    assert run.state.holder is not None and run.state.holder.expires_ms == 5_750
    assert out.grants[0].token == 1 and out.grants[0].waited_ms == 0


def test_waiters_queue_fifo_and_each_release_grants_the_next_with_a_new_token() -> None:
    run = Run()
    run(acquire("a"))
    # queue_position: how many are ahead, the holder included
    assert [(r.status, r.queue_position) for r in run(acquire("b")).replies] == [("queued", 1)]
    assert [(r.status, r.queue_position) for r in run(acquire("c")).replies] == [("queued", 2)]
    out = run(release(1), now_ms=1_500)
    assert statuses(out) == [("rel", "granted", 1), ("b", "granted", 2)]
    assert out.grants[0].waited_ms == 500 and out.ended[0].how == "released"
    assert statuses(run(release(2))) == [("rel", "granted", 2), ("c", "granted", 3)]
    out = run(release(3))
    assert statuses(out) == [("rel", "granted", 3)] and run.state.holder is None
    assert run.state.last_token == 3


@pytest.mark.parametrize("kind", ["renew", "release"])
def test_stale_tokens_are_refused(kind: str) -> None:
    run = Run()
    run(acquire("a"))
    run(release(1))
    run(acquire("b"))  # token 2 now
    stale = renew(1) if kind == "renew" else release(1)
    out = run(stale)
    assert statuses(out) == [(stale.request_id, "refused", 1)]
    assert "stale token 1: the holder has 2" in (out.replies[0].reason or "")
    assert run.state.holder is not None and run.state.holder.token == 2


def test_renew_with_the_holders_token_moves_the_deadline() -> None:
    run = Run(now_ms=1_000)
    run(acquire("a", ttl_ms=1_000))
    out = run(renew(1, ttl_ms=3_000), now_ms=1_800)
    assert statuses(out) == [("r", "granted", 1)]
    assert out.replies[0].lease_expires_ms == 4_800
    assert run.state.holder == replace(run.state.holder, ttl_ms=3_000, expires_ms=4_800)


def test_expire_takes_effect_only_on_the_lease_version_it_names() -> None:
    run = Run(now_ms=1_000)
    run(acquire("a", ttl_ms=1_000))
    run(acquire("b"))
    seen = run.state.holder
    assert seen is not None
    run(renew(1), now_ms=1_900)  # the holder renewed after the timer looked
    out = run(expire_request(seen, request_id="x", owner="timer"))
    assert out.replies == () and out.ended == () and run.state.holder.token == 1  # type: ignore[union-attr]
    current = run.state.holder
    assert current is not None
    out = run(expire_request(current, request_id="y", owner="timer"), now_ms=3_000)
    assert statuses(out) == [("a", "expired", 1), ("b", "granted", 2)]
    assert out.ended[0].how == "expired" and out.ended[0].held_ms == 2_000


def test_withdrawing_a_waiter_removes_it_and_a_later_resend_is_refused() -> None:
    run = Run()
    run(acquire("a"))
    run(acquire("b"))
    run(acquire("c"))
    assert statuses(run(release(None, acquire_id="b"))) == [("rel", "granted", None)]
    assert [w.request_id for w in run.state.queue] == ["c"]
    out = run(acquire("b"))
    assert statuses(out) == [("b", "refused", None)]
    assert "already ended" in str(out.replies[0].reason)
    assert statuses(run(release(1))) == [("rel", "granted", 1), ("c", "granted", 2)]


def test_withdrawing_an_acquire_that_was_granted_meanwhile_releases_it() -> None:
    run = Run()
    run(acquire("a"))
    run(acquire("b"))
    out = run(release(None, acquire_id="a"))
    assert statuses(out) == [("rel", "granted", 1), ("b", "granted", 2)]
    assert out.ended[0].how == "withdrawn"


def test_withdrawing_an_acquire_before_it_arrives_keeps_it_from_being_granted() -> None:
    run = Run()
    run(release(None, acquire_id="late"))
    out = run(acquire("late"))
    assert statuses(out) == [("late", "refused", None)] and run.state.holder is None


def test_a_resent_acquire_gets_the_same_answer_again() -> None:
    run = Run()
    run(acquire("a"))
    run(acquire("b"))
    assert statuses(run(acquire("a"))) == [("a", "granted", 1)]
    out = run(acquire("b"))
    assert [(r.status, r.queue_position) for r in out.replies] == [("queued", 1)]
    assert len(run.state.queue) == 1 and run.state.last_token == 1


def test_a_resent_acquire_after_its_lease_ended_is_refused_not_granted() -> None:
    run = Run()
    run(acquire("a"))
    run(release(1))
    out = run(acquire("a"))
    assert statuses(out) == [("a", "refused", None)] and run.state.holder is None


def test_finished_acquires_are_remembered_up_to_a_bound() -> None:
    run = Run()
    for i in range(FINISHED_MEMORY + 3):
        run(acquire(f"a{i}"))
        run(release(i + 1))
    assert len(run.state.finished) == FINISHED_MEMORY
    assert run.state.finished[-1] == f"a{FINISHED_MEMORY + 2}"


def test_a_request_at_or_below_the_applied_offset_is_a_duplicate() -> None:
    state = apply(TableLock(), acquire("a"), offset=7, now_ms=0).state
    for offset in (3, 7):
        out = apply(state, acquire("b"), offset=offset, now_ms=0)
        assert out.duplicate and out.state is state and out.replies == ()
    assert apply(state, acquire("b"), offset=8, now_ms=0).state.queue[0].request_id == "b"


def _expire_due(run: Run, now_ms: int) -> Outcome:
    """What the service's timer does at ``now_ms``: expire the holder if its lease ran out."""
    due = due_expiry(run.state, now_ms=now_ms, owned_since_ms=0)
    assert due is not None, f"the lease of {run.state.holder} has not run out at {now_ms}"
    return run(expire_request(due, request_id=f"timer{now_ms}", owner="timer"), now_ms=now_ms)


def test_waiters_that_died_in_the_queue_do_not_each_hold_the_lock_for_a_ttl() -> None:
    """The Kafka campaign's ``requested_left_behind`` (seed 12): a holder and two waiters were
    killed; each dead waiter's acquire was granted in turn and held for a whole ttl, so the
    cleaner waited three ttls for the lock before it could roll the dead writers back. A lease
    granted from the queue counts from when the waiter was last heard of: a dead waiter's lease
    has run out by then, and the live waiter behind them gets the lock one ttl after the
    holder's last renewal, not three."""
    ttl = 30_000
    run = Run(now_ms=0)
    run(acquire("holder", owner="h", ttl_ms=ttl))  # killed while holding: expires at 30 s
    run(acquire("dead1", owner="d1", ttl_ms=ttl), now_ms=100)  # killed while queued
    run(acquire("dead2", owner="d2", ttl_ms=ttl), now_ms=1_200)  # killed while queued
    run(acquire("live", owner="l", ttl_ms=ttl), now_ms=2_000)
    for now in range(5_000, 30_000, 3_000):  # a live client resends a queued acquire
        run(acquire("live", owner="l", ttl_ms=ttl), now_ms=now)
    out = _expire_due(run, 30_000)
    assert statuses(out) == [("holder", "expired", 1), ("dead1", "granted", 2)]
    assert out.replies[1].lease_expires_ms == 30_100  # heard of at 100 ms, not granted now + ttl
    out = _expire_due(run, 30_100)
    assert statuses(out) == [("dead1", "expired", 2), ("dead2", "granted", 3)]
    out = _expire_due(run, 31_200)
    assert statuses(out) == [("dead2", "expired", 3), ("live", "granted", 4)]
    # the live waiter was heard of at 29 s: nearly a whole ttl, renewed from there as usual
    assert out.replies[1].lease_expires_ms == 29_000 + ttl
    assert due_expiry(run.state, now_ms=58_999, owned_since_ms=0) is None


def test_a_waiter_granted_at_once_or_soon_after_its_request_gets_the_whole_ttl() -> None:
    run = Run(now_ms=1_000)
    assert run(acquire("a", ttl_ms=5_000)).replies[0].lease_expires_ms == 6_000
    run(acquire("b", ttl_ms=5_000), now_ms=1_500)
    out = run(release(1), now_ms=1_600)
    assert statuses(out) == [("rel", "granted", 1), ("b", "granted", 2)]
    assert out.replies[1].lease_expires_ms == 6_500  # counted from 1.5 s: the client's view
    # is its own send + ttl, never later than the service's


def test_json_round_trip() -> None:
    run = Run()
    run(acquire("a"))
    run(acquire("b"))
    run(acquire("b"), now_ms=1_700)  # a resend: seen_ms set
    assert run.state.queue[0].seen_ms == 1_700
    run(release(None, acquire_id="zzz"))
    assert lock_from_json(lock_to_json(run.state)) == run.state
    assert lock_from_json(None) == TableLock()


def test_expiry_after_a_restart_is_never_earlier_than_one_ttl_after_taking_over() -> None:
    holder = Holder("a", "w", 4, 10_000, ROUTE, granted_ms=0, expires_ms=10_000)
    assert effective_expiry_ms(holder, owned_since_ms=0) == 10_000
    # the service came back at t=25 s: the holder gets until 35 s to renew
    assert effective_expiry_ms(holder, owned_since_ms=25_000) == 35_000
    state = TableLock(last_token=4, holder=holder)
    for now, expected in ((34_999, None), (35_000, holder)):
        assert due_expiry(state, now_ms=now, owned_since_ms=25_000) == expected
        assert due_expiry_json(lock_to_json(state), now_ms=now, owned_since_ms=25_000) == expected
    assert due_expiry(TableLock(), now_ms=10**12, owned_since_ms=0) is None


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (Request("acquire", "", "w", 10, ROUTE), "request_id is empty"),
        (Request("acquire", "a", "", 10, ROUTE), "owner is empty"),
        (Request("acquire", "a", "w", 0, ROUTE), "acquire needs ttl_ms > 0"),
        (Request("renew", "a", "w", -1, ROUTE, token=1), "renew needs ttl_ms > 0"),
        (Request("renew", "a", "w", 10, ROUTE), "renew needs the token"),
        (Request("release", "a", "w", 0, ROUTE), "release needs the token"),
        (Request("expire", "a", "w", 0, ROUTE, token=1), "expire needs token and"),
    ],
)
def test_validate_names_the_problem(request_: Request, problem: str) -> None:
    assert problem in (validate(request_) or "")


def test_valid_requests_pass_validation() -> None:
    for request in (acquire("a"), renew(1), release(1), release(None, acquire_id="a")):
        assert validate(request) is None


# -- model test: random request sequences from several clients ------------------------------

CLIENTS = ("p", "q", "r", "s")


@st.composite
def scripts(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    """(action, client, clock step) triples; the runner turns them into requests."""
    actions = st.sampled_from(["acquire", "renew", "release", "withdraw", "expire", "resend"])
    steps = st.lists(st.tuples(actions, st.sampled_from(CLIENTS), st.integers(0, 400)), max_size=60)
    return draw(steps)


def play(script: list[tuple[str, str, int]], *, restart_at: int | None = None) -> list[Outcome]:
    """Run ``script``; at ``restart_at`` the state goes through JSON (a restart from the
    changelog) and a prefix of requests is delivered again (at-least-once)."""
    state, clock, outcomes = TableLock(), 0, []
    log: list[Request] = []
    acquired: dict[str, list[str]] = {c: [] for c in CLIENTS}
    for step, (action, client, dt) in enumerate(script):
        clock += dt
        request = _request(action, client, step, state, acquired)
        if request is None:
            continue
        log.append(request)
        outcome = apply(state, request, offset=len(log) - 1, now_ms=clock)
        state = outcome.state
        outcomes.append(outcome)
        if restart_at is not None and step == restart_at:
            state = lock_from_json(lock_to_json(state))
            for offset, again in enumerate(log[-3:], start=max(0, len(log) - 3)):
                assert apply(state, again, offset=offset, now_ms=clock + 5).duplicate
    return outcomes


def _request(
    action: str, client: str, step: int, state: TableLock, acquired: dict[str, list[str]]
) -> Request | None:
    holder = state.holder
    mine = holder is not None and holder.owner == client
    if action == "acquire":
        acquired[client].append(f"{client}{step}")
        return acquire(f"{client}{step}", owner=client)
    if action == "resend" and acquired[client]:
        return acquire(acquired[client][-1], owner=client)
    if action == "withdraw" and acquired[client]:
        return Request("release", f"w{step}", client, 0, ROUTE, acquire_id=acquired[client][0])
    if action in ("renew", "release"):
        # sometimes the holder's token, sometimes a stale one
        token = holder.token if mine and holder is not None else max(1, state.last_token - 1)
        return Request(action, f"x{step}", client, 500, ROUTE, token=token)  # type: ignore[arg-type]
    if action == "expire" and holder is not None:
        return expire_request(holder, request_id=f"e{step}", owner="timer")
    return None


@settings(max_examples=examples(300), deadline=None)
@given(script=scripts())
def test_model_tokens_increase_fifo_holds_and_replies_match_the_state(
    script: list[tuple[str, str, int]],
) -> None:
    outcomes = play(script)
    tokens = [g.token for o in outcomes for g in o.grants]
    assert tokens == list(range(1, len(tokens) + 1))  # +1 per grant, never reused
    for outcome in outcomes:
        state = outcome.state
        if state.holder is None:
            assert state.queue == ()  # never idle with waiters
        granted = [r for r in outcome.replies if r.status == "granted" and r.lease_expires_ms]
        for reply in granted:
            assert reply.token is not None and reply.token <= state.last_token
        ids = [w.request_id for w in state.queue]
        assert len(ids) == len(set(ids))  # a resend never queues twice
        assert state.holder is None or state.holder.request_id not in ids


@settings(max_examples=examples(150), deadline=None)
@given(script=scripts(), shift=st.integers(1, 10**6))
def test_model_decisions_do_not_depend_on_the_clock(
    script: list[tuple[str, str, int]], shift: int
) -> None:
    """Replaying the same requests at other times grants the same leases to the same
    requests: that is what makes answering before the changelog is durable safe."""
    slow = [(action, client, dt * 3 + shift) for action, client, dt in script]

    def decisions(outcomes: list[Outcome]) -> list[tuple[str, str, int | None]]:
        return [(r.request_id, r.status, r.token) for o in outcomes for r in o.replies]

    assert decisions(play(script)) == decisions(play(slow))


@settings(max_examples=examples(150), deadline=None)
@given(script=scripts(), data=st.data())
def test_model_restart_from_json_and_redelivery_change_nothing(
    script: list[tuple[str, str, int]], data: st.DataObject
) -> None:
    if not script:
        return
    restart_at = data.draw(st.integers(0, len(script) - 1))
    plain, restarted = play(script), play(script, restart_at=restart_at)
    assert [o.state for o in plain] == [o.state for o in restarted]
