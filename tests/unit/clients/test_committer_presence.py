"""CommitterPresence: is a job-committer a member of its group? With fake member counts and
a skipping clock (no broker, no sleeps)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from lakewarden.clients import CommitServiceUnavailableError, JobCommitterUnavailableError
from lakewarden.clients.committer_presence import (
    CommitterPresence,
    _BrokerMembers,
    job_committer_group,
)
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.testing import ManualClock

SETTINGS = Settings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1", topic_prefix="t1."))


def answers(*counts: int | None) -> Iterator[int | None]:
    yield from counts
    while True:
        yield counts[-1]


def presence(counts: Iterator[int | None], clock: ManualClock, **kw: float) -> CommitterPresence:
    return CommitterPresence(
        SETTINGS,
        wait_s=kw.get("wait_s", 2.0),
        remember_s=kw.get("remember_s", 10.0),
        poll_s=0.5,
        members=lambda: next(counts),
        clock=clock.monotonic,
        sleep=clock.sleep,
    )


def test_the_group_is_the_prefixed_service_name() -> None:
    assert job_committer_group(SETTINGS) == "t1.job-committer"


def test_a_member_present_returns_at_once() -> None:
    clock = ManualClock(skip_sleeps=True)
    presence(answers(1), clock).require(table="t", instant="i")
    assert clock.slept == []


def test_a_committer_that_joins_within_the_wait_is_waited_for() -> None:
    clock = ManualClock(skip_sleeps=True)
    presence(answers(0, None, 0, 2), clock).require(table="t", instant="i")
    assert clock.slept == [0.5, 0.5, 0.5]


def test_none_within_the_wait_raises_a_named_retryable_error_with_help() -> None:
    clock = ManualClock(skip_sleeps=True)
    with pytest.raises(JobCommitterUnavailableError) as err:
        presence(answers(0), clock, wait_s=2.0).require(table="orders", instant="20260101")
    assert isinstance(err.value, CommitServiceUnavailableError)
    assert (err.value.table, err.value.instant) == ("orders", "20260101")
    message = str(err.value)
    assert "'t1.job-committer'" in message and "has no member" in message
    assert "LAKEWARDEN_KAFKA__JOB_COMMITS=embedded" in message
    assert sum(clock.slept) == pytest.approx(2.0)  # bounded by wait_s, not longer


def test_a_broker_that_cannot_say_is_reported_as_such() -> None:
    clock = ManualClock(skip_sleeps=True)
    with pytest.raises(JobCommitterUnavailableError, match="could not describe it"):
        presence(answers(None), clock, wait_s=0.0).require(table="t", instant="i")


def test_a_member_seen_is_remembered_then_asked_again_and_forgotten_on_request() -> None:
    clock = ManualClock(skip_sleeps=True)
    asked: list[int] = []

    def members() -> int:
        asked.append(1)
        return 1 if len(asked) == 1 else 0

    check = CommitterPresence(
        SETTINGS, wait_s=0.0, remember_s=10.0, members=members, clock=clock.monotonic
    )
    check.require(table="t", instant="i")
    clock.advance(9.0)
    check.require(table="t", instant="i")  # remembered: the broker is not asked
    assert len(asked) == 1
    check.forget()
    with pytest.raises(JobCommitterUnavailableError):
        check.require(table="t", instant="i")
    assert len(asked) == 2


def test_job_commits_default_to_the_service_and_writer_is_the_opt_outs_former_name() -> None:
    assert KafkaSettings().job_commits == "service"
    assert KafkaSettings(job_commits="embedded").job_commits == "embedded"
    assert KafkaSettings(job_commits="writer").job_commits == "embedded"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job_commits"):
        KafkaSettings(job_commits="elsewhere")  # type: ignore[arg-type]


def test_the_opt_out_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEWARDEN_KAFKA__JOB_COMMITS", "embedded")
    monkeypatch.setenv("LAKEWARDEN_KAFKA__JOB_COMMITTER_WAIT_S", "2.5")
    kafka = Settings().kafka
    assert (kafka.job_commits, kafka.job_committer_wait_s) == ("embedded", 2.5)


def test_the_kafka_coordinator_hands_job_commits_to_the_service_unless_opted_out() -> None:
    from lakewarden.clients import KafkaCoordinator

    by_default = KafkaCoordinator(SETTINGS)  # no network IO until used
    kafka = SETTINGS.kafka.model_copy(update={"job_commits": "embedded"})
    opted_out = KafkaCoordinator(SETTINGS.model_copy(update={"kafka": kafka}))
    try:
        assert by_default.job_commits() is not None
        assert opted_out.job_commits() is None
    finally:
        by_default.close()
        opted_out.close()


class _FakeAdmin:
    """``describe_consumer_groups`` answering with one failure (a confluent-kafka future)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def describe_consumer_groups(self, groups: list[str], **_: object) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        future.set_exception(KafkaException(KafkaError(self.code)))
        return {groups[0]: future}


@pytest.mark.parametrize(
    ("code", "members"),
    [
        (KafkaError.GROUP_ID_NOT_FOUND, 0),  # never joined: no committer
        (KafkaError.GROUP_AUTHORIZATION_FAILED, 1),  # may not ask: the check is skipped
        (KafkaError._TRANSPORT, None),  # the broker could not say
    ],
)
def test_the_brokers_refusals_map_to_a_member_count(code: int, members: int | None) -> None:
    count = _BrokerMembers(SETTINGS, "t1.job-committer")
    count._admin = _FakeAdmin(code)  # type: ignore[assignment]
    assert count() == members
