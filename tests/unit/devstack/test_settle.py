"""``topics_lagging``: what one broker's metadata still lacks before ``dev up`` returns (the
three metadata-propagation steps the quarantined three-broker test failed at)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lakewarden.devstack.settle import topics_lagging


def _partition(pid: int, *, leader: int = 1, replicas: int = 3, isrs: int = 3) -> Any:
    return SimpleNamespace(
        id=pid, leader=leader, replicas=list(range(replicas)), isrs=list(range(isrs))
    )


def _metadata(**topics: Any) -> Any:
    return SimpleNamespace(topics=topics)


def _topic(*partitions: Any, error: Any = None) -> Any:
    return SimpleNamespace(error=error, partitions={p.id: p for p in partitions})


def test_a_broker_that_settled_lacks_nothing() -> None:
    metadata = _metadata(a=_topic(_partition(0), _partition(1)), b=_topic(_partition(0)))
    assert topics_lagging(metadata, {"a": 2, "b": 1}, replication=3) == []


def test_each_propagation_step_a_broker_can_lag_at() -> None:
    metadata = _metadata(
        known_elsewhere=_topic(error="UNKNOWN_TOPIC_OR_PART"),
        no_partitions_yet=_topic(),
        one_of_two=_topic(_partition(0)),
        leaderless=_topic(_partition(0, leader=-1)),
        short_isr=_topic(_partition(0), _partition(1, isrs=2)),
    )
    wanted = {
        "absent": 1,
        "known_elsewhere": 1,
        "no_partitions_yet": 1,
        "one_of_two": 2,
        "leaderless": 1,
        "short_isr": 2,
    }
    assert topics_lagging(metadata, wanted, replication=3) == [
        "absent: unknown",
        "known_elsewhere: unknown",
        "leaderless: partitions [0] without a leader or full ISR",
        "no_partitions_yet: 0 of 1 partitions",
        "one_of_two: 1 of 2 partitions",
        "short_isr: partitions [1] without a leader or full ISR",
    ]
    assert topics_lagging(metadata, {"short_isr": 2}, replication=2) == []
