"""Instants: parse/render round trips, ordering, and next_after monotonicity."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.errors import NonRetryableError
from lakewarden.table.instant import (
    Action,
    Instant,
    InvalidInstantError,
    QualifiedInstant,
    Transition,
)

moments = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 58)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=UTC))


@given(moments)
def test_parse_render_round_trip(moment: datetime) -> None:
    text = moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"
    instant = Instant.parse(text)
    assert str(instant) == text == instant.file_name
    assert Instant.parse(str(instant)) == instant
    assert Instant.from_epoch_ms(instant.epoch_ms) == instant
    # exact integer arithmetic: float timestamps lose the millisecond beyond year ~4000
    assert (
        instant.epoch_ms == calendar.timegm(moment.timetuple()) * 1000 + moment.microsecond // 1000
    )


@given(st.sampled_from(Action), st.sampled_from(Transition), moments)
def test_qualified_name_round_trip(
    action: Action, transition: Transition, moment: datetime
) -> None:
    instant = Instant.from_epoch_ms(int(moment.timestamp() * 1000))
    qualified = QualifiedInstant(instant, action, transition)
    assert qualified.file_name == f"{instant}.{action.value}.{transition.value}"
    assert QualifiedInstant.parse(qualified.file_name) == qualified


@given(st.lists(st.integers(min_value=0, max_value=2**41), min_size=2, max_size=20))
def test_order_is_chronological(epochs: list[int]) -> None:
    instants = [Instant.from_epoch_ms(ms) for ms in epochs]
    assert sorted(instants) == [Instant.from_epoch_ms(ms) for ms in sorted(epochs)]


@settings(max_examples=examples(50))
@given(st.lists(st.integers(min_value=0, max_value=2**41), min_size=1, max_size=30))
def test_next_after_is_strictly_increasing_whatever_the_clock(clock: list[int]) -> None:
    last: Instant | None = None
    for now_ms in clock:  # the clock may step backwards or stand still
        nxt = Instant.next_after(last, now_ms=now_ms)
        if last is not None:
            assert nxt > last
            assert nxt.epoch_ms == max(now_ms, last.epoch_ms + 1)
        else:
            assert nxt.epoch_ms == now_ms
        last = nxt


def test_next_after_uses_the_wall_clock_by_default() -> None:
    before = datetime.now(UTC).timestamp() * 1000
    instant = Instant.next_after(None)
    after = datetime.now(UTC).timestamp() * 1000
    assert before - 1 <= instant.epoch_ms <= after + 1  # taken between the two readings


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2024010203040567", "expected 17 digits"),
        ("202401020304056789", "expected 17 digits"),
        ("2024010203040567x", "expected 17 digits"),
        ("20241302030405678", "month must be in 1..12"),
        ("20240230030405678", "day is out of range"),
        ("20240102250405678", "hour must be in 0..23"),
        ("", "expected 17 digits"),
    ],
)
def test_parse_rejects_bad_times_clearly(text: str, why: str) -> None:
    with pytest.raises(InvalidInstantError, match=why) as info:
        Instant.parse(text)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, NonRetryableError)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("20240102030405678.commit", "expected '<time>.<action>.<transition>'"),
        ("20240102030405678.merge.completed", "unknown action or transition"),
        ("20240102030405678.commit.done", "unknown action or transition"),
        ("2024.commit.completed", "expected 17 digits"),
    ],
)
def test_qualified_parse_rejects_bad_names(name: str, why: str) -> None:
    with pytest.raises(InvalidInstantError, match=why):
        QualifiedInstant.parse(name)


def test_from_epoch_ms_out_of_range() -> None:
    with pytest.raises(InvalidInstantError, match="outside years 1..9999"):
        Instant.from_epoch_ms(10**20)
