"""The tracker alone: verdicts by broker time, grace after assignment, forgetting."""

from __future__ import annotations

import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.clients.liveness import LivenessRecord
from lakewarden_services.heartbeat_monitor.tracker import Beat, Outcome, Tracker

TOL = 1_500  # interval 500 ms x 3 misses
ME = "monitor-1"


def judging(*partitions: int, floor_ms: int = 0, forget_after_ms: int = 60_000) -> Tracker:
    """A tracker past its grace on ``partitions`` (floor at ``floor_ms``)."""
    tracker = Tracker(instance_id=ME, forget_after_ms=forget_after_ms)
    tracker.assign(partitions or (0,), wall_ms=0)
    for partition in partitions or (0,):
        tracker.end_grace(partition, floor_ms, [])
    return tracker


def beat(
    at: int,
    *,
    instant: str = "i1",
    partition: int = 0,
    final: bool = False,
    tolerance_ms: int = TOL,
    owner: str = "w1",
) -> Beat:
    return Beat("t1", instant, owner, partition, at, tolerance_ms, final)


def statuses(outcome: Outcome) -> list[str | None]:
    return [None if c.record is None else c.record.status for c in outcome.changes]


def test_first_beat_records_alive_then_silence_past_tolerance_is_one_death() -> None:
    tracker = judging()
    assert statuses(tracker.beat(beat(1_000))) == ["alive"]

    assert tracker.advance(0, 1_000 + TOL) == Outcome()  # exactly the tolerance: not yet
    outcome = tracker.advance(0, 1_000 + TOL + 1)

    assert statuses(outcome) == ["dead"]
    [expiry] = outcome.expiries
    assert (expiry.table_id, expiry.instant, expiry.owner) == ("t1", "i1", "w1")
    assert (expiry.last_seen_ms, expiry.tolerance_ms, expiry.frontier_ms) == (1_000, TOL, 2_501)
    assert tracker.advance(0, 10_000).expiries == []  # once per death
    assert tracker.status("t1", "i1") == "dead"


def test_beats_on_time_keep_an_instant_alive_forever() -> None:
    tracker = judging()
    for at in range(0, 60_000, TOL):  # a slow writer: every beat lands just within tolerance
        tracker.beat(beat(at))
        assert tracker.advance(0, at + TOL).expiries == []
    assert tracker.status("t1", "i1") == "alive"


def test_time_only_moves_with_the_partition_of_the_instant() -> None:
    tracker = judging(0, 1)
    tracker.beat(beat(1_000, partition=0))
    assert tracker.advance(1, 99_000).expiries == []  # partition 1's clock says nothing
    assert len(tracker.advance(0, 2_501).expiries) == 1


def test_each_instant_has_its_own_tolerance() -> None:
    tracker = judging()
    tracker.beat(beat(0, instant="short", tolerance_ms=1_000))
    tracker.beat(beat(0, instant="long", tolerance_ms=5_000))
    assert [e.instant for e in tracker.advance(0, 1_001).expiries] == ["short"]
    assert [e.instant for e in tracker.advance(0, 5_001).expiries] == ["long"]


def test_nothing_dies_in_grace_and_everyone_gets_a_tolerance_after_the_floor() -> None:
    tracker = Tracker(instance_id=ME, forget_after_ms=60_000)
    tracker.assign([0], wall_ms=5_000)
    tracker.beat(beat(1_000))
    assert tracker.in_grace(0)
    assert tracker.advance(0, 50_000).expiries == []  # a lagging or restarted monitor

    assert not tracker.accepts_floor(0, sender="someone-else", sent_wall_ms=6_000)
    assert not tracker.accepts_floor(0, sender=ME, sent_wall_ms=4_999)  # sent before assigned
    assert tracker.accepts_floor(0, sender=ME, sent_wall_ms=5_000)
    tracker.end_grace(0, 50_000, [])

    assert tracker.advance(0, 50_000 + TOL).expiries == []
    [expiry] = tracker.advance(0, 50_000 + TOL + 1).expiries
    assert expiry.last_seen_ms == 1_000  # the truth, not the grace
    assert not tracker.accepts_floor(0, sender=ME, sent_wall_ms=9_000)  # grace is over


def test_grace_restores_the_table_records_of_its_partition() -> None:
    tracker = Tracker(instance_id=ME, forget_after_ms=60_000)
    tracker.assign([0], wall_ms=0)

    def record(status: str, partition: int = 0) -> LivenessRecord:
        return LivenessRecord(status, "w", partition, 1_000, TOL, 1_000)  # type: ignore[arg-type]

    outcome = tracker.end_grace(
        0,
        20_000,
        [
            (("t1", "alive"), record("alive")),
            (("t1", "dead"), record("dead")),
            (("t1", "ended"), record("ended")),
            (("t1", "elsewhere"), record("alive", partition=3)),
        ],
    )

    assert outcome == Outcome()
    assert tracker.status("t1", "elsewhere") is None
    assert tracker.status("t1", "dead") == "dead"
    expiries = tracker.advance(0, 20_000 + TOL + 1).expiries
    assert [e.instant for e in expiries] == ["alive"]  # the dead one is not declared again


def test_restored_record_of_a_finished_instant_is_deleted() -> None:
    tracker = Tracker(instance_id=ME, forget_after_ms=60_000)
    tracker.assign([0], wall_ms=0)
    tracker.finish("t1", "i1")
    record = LivenessRecord("alive", "w", 0, 1_000, TOL, 1_000)
    outcome = tracker.end_grace(0, 5_000, [(("t1", "i1"), record)])
    assert [(c.key, c.record) for c in outcome.changes] == [(("t1", "i1"), None)]
    assert tracker.status("t1", "i1") is None


def test_a_zombie_stays_dead() -> None:
    tracker = judging()
    tracker.beat(beat(0))
    assert len(tracker.advance(0, TOL + 1).expiries) == 1
    assert tracker.beat(beat(TOL + 2)) == Outcome()
    assert tracker.advance(0, 30_000).expiries == []
    assert tracker.status("t1", "i1") == "dead" and tracker.zombie_beats == 1


def test_final_beat_ends_without_expiry_and_a_new_beat_revives() -> None:
    tracker = judging()
    tracker.beat(beat(0))
    assert statuses(tracker.beat(beat(100, final=True))) == ["ended"]
    assert tracker.advance(0, 10_000).expiries == []

    assert statuses(tracker.beat(beat(10_000))) == ["alive"]
    assert len(tracker.advance(0, 10_000 + TOL + 1).expiries) == 1


def test_terminal_transition_forgets_the_instant_and_its_late_beats() -> None:
    tracker = judging(0, 1)
    tracker.beat(beat(0))
    tracker.finish("t1", "i1")
    assert tracker.advance(1, 10).changes == []  # the deletion belongs to partition 0
    outcome = tracker.advance(0, 10)
    assert [(c.key, c.record) for c in outcome.changes] == [(("t1", "i1"), None)]

    assert tracker.beat(beat(20)) == Outcome()  # a late beat
    assert tracker.advance(0, 100_000) == Outcome()
    assert tracker.status("t1", "i1") is None and len(tracker) == 0


def test_verdicts_are_forgotten_after_forget_after() -> None:
    tracker = judging(forget_after_ms=10_000)
    tracker.beat(beat(0, instant="dies"))
    tracker.beat(beat(0, instant="ends"))
    tracker.beat(beat(1, instant="ends", final=True))
    assert len(tracker.advance(0, TOL + 1).expiries) == 1
    assert tracker.counts["dead"] == 1 and tracker.counts["ended"] == 1

    assert tracker.advance(0, 10_000).changes == []
    forgotten = tracker.advance(0, 11_501).changes
    assert sorted(c.key[1] for c in forgotten) == ["dies", "ends"]
    assert all(c.record is None for c in forgotten)
    assert len(tracker) == 0 and +tracker.counts == {}


def test_revoke_forgets_the_partition_and_a_new_assignment_starts_in_grace() -> None:
    tracker = judging(0)
    tracker.beat(beat(0))
    tracker.revoke([0])
    assert len(tracker) == 0
    tracker.assign([0], wall_ms=1)
    assert tracker.in_grace(0)
    tracker.beat(beat(100))
    assert tracker.advance(0, 100_000).expiries == []


def test_counts_follow_statuses() -> None:
    tracker = judging()
    for n in range(5):
        tracker.beat(beat(0, instant=f"i{n}"))
    tracker.beat(beat(1_000, instant="i0"))
    tracker.advance(0, TOL + 1)
    assert +tracker.counts == {"alive": 1, "dead": 4}


@settings(max_examples=examples(200), deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=2 * TOL), min_size=1, max_size=30),
    ticks=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=60),
)
def test_death_is_exactly_the_first_silence_longer_than_the_tolerance(
    gaps: list[int], ticks: list[int]
) -> None:
    """Beats at cumulative ``gaps``, ticks advancing the clock between them: the tracker
    declares death at the first tick whose frontier is more than TOL past the last beat."""
    beats, at = [], 0
    for gap in gaps:
        at += gap
        beats.append(at)
    clock, tick_times = 0, []
    for step in ticks * (1 + beats[-1] // max(sum(ticks), 1)):
        clock += step
        tick_times.append(clock)
        if clock > beats[-1] + 2 * TOL:
            break
    events = sorted([(t, "beat") for t in beats] + [(t, "tick") for t in tick_times])

    expected: int | None = None
    last = None
    for t, kind in events:  # the model: a silence is judged whenever time is observed
        if last is not None and t - last > TOL and expected is None:
            expected = t
        if kind == "beat" and expected is None:
            last = t

    tracker, declared = judging(), []
    for t, kind in events:
        outcome = tracker.beat(beat(t)) if kind == "beat" else tracker.advance(0, t)
        declared += [e.frontier_ms for e in outcome.expiries]
    assert declared == ([] if expected is None else [expected])


@pytest.mark.parametrize("instants", [1, 1_000])
def test_heap_stays_as_small_as_the_instants(instants: int) -> None:
    tracker = judging()
    for at in range(0, 10_000, 500):
        for n in range(instants):
            tracker.beat(beat(at, instant=f"i{n}"))
        tracker.advance(0, at)
    assert len(tracker._partitions[0].deadlines) <= instants
