"""How long a consumer-group rebalance takes with the classic protocol and with KIP-848's
consumer protocol (``group.protocol=consumer``), on one broker, in one run.

    python -m benchmarks.rebalance_protocols                  # its own broker, 5 repetitions
    python -m benchmarks.rebalance_protocols --bootstrap 127.0.0.1:9092 --repeat 5

What is timed is the handover of a plain-loop service's partitions (timeline-lock,
heartbeat-monitor, cancel-manager and error-sink each run one librdkafka consumer in a group):

- **join**: member A owns every partition of the topic; member B subscribes. Timed from B's
  ``subscribe`` until A and B together own every partition, each some, none both (as told by
  their own rebalance callbacks).
- **leave**: B closes (leaving the group). Timed from B's ``close`` until A owns every
  partition again.

Each variant gets a fresh group per repetition; variants are interleaved (one repetition of
each, then the next), so a load spike on the shared machine hits them alike:

- ``classic``: what the loop services configure (``session.timeout.ms`` 6 s,
  ``heartbeat.interval.ms`` 1 s, the eager ``range`` assignor);
- ``consumer-default``: KIP-848 with the broker's group timing left at Kafka's defaults
  (heartbeat every 5 s, session 45 s), the server-side ``range`` assignor;
- ``consumer-1s``: KIP-848 with the group's own timing set to the classic variant's (heartbeat
  1 s, session 6 s: group configs ``consumer.heartbeat.interval.ms`` /
  ``consumer.session.timeout.ms``, allowed by the dev broker's lowered minimums).

Also reported per variant: whether a member whose partitions were partly revoked was told so
by an assignment callback afterwards (``reassigned``), which is what a service's health
(``Membership``) waits for before it reports OK again.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from lakewarden.devstack import processes
from lakewarden.devstack.kafka import KafkaBroker
from lakewarden.events import EventConsumer
from lakewarden.settings import KafkaSettings, Settings

PARTITIONS = 12
EVERY = set(range(PARTITIONS))
TIMEOUT_S = 60.0

CLASSIC: dict[str, Any] = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 1_000,
    "partition_assignment_strategy": "range",
}
CONSUMER: dict[str, Any] = {"group_protocol": "consumer", "group_remote_assignor": "range"}
FAST_GROUP = {"consumer.heartbeat.interval.ms": "1000", "consumer.session.timeout.ms": "6000"}


@dataclass
class Variant:
    name: str
    config: dict[str, Any]
    group_config: dict[str, str] = field(default_factory=dict)
    static: bool = True  # also time a static member's restart
    join_s: list[float] = field(default_factory=list)
    paused_s: list[float] = field(default_factory=list)
    leave_s: list[float] = field(default_factory=list)
    restart_s: list[float] = field(default_factory=list)
    reassigned: list[bool] = field(default_factory=list)


class Member:
    """One group member polling in its own thread; its rebalance callbacks keep ``owned``."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        group: str,
        config: dict[str, Any],
        instance: str | None = None,
    ):
        self.owned: set[int] = set()
        self.events: list[tuple[float, set[int]]] = []  # (when, owned from then on)
        self.assigns_after_revoke = 0
        self._revoked = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.closing_at = 0.0
        if instance is not None:
            config = {**config, "group_instance_id": instance}
        self._consumer = EventConsumer(
            settings, group_id=group, auto_commit=False, dead_letters=False, **config
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def leave(self) -> None:
        """Stop polling and close (leave the group); returns at once."""
        self._stop.set()

    def join(self) -> None:
        self._thread.join(TIMEOUT_S)

    def snapshot(self) -> set[int]:
        with self._lock:
            return set(self.owned)

    def _run(self) -> None:
        self._consumer.subscribe(
            [self._topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke
        )
        while not self._stop.is_set():
            self._consumer.poll_message(0.02)
        self.closing_at = time.monotonic()
        self._consumer.close()

    def _assign(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.owned |= {tp.partition for tp in partitions}
            self.events.append((time.monotonic(), set(self.owned)))
            if self._revoked:
                self.assigns_after_revoke += 1

    def _revoke(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.owned -= {tp.partition for tp in partitions}
            self.events.append((time.monotonic(), set(self.owned)))
            self._revoked = True


def wait_until(check: Callable[[], bool], *, what: str) -> float:
    """Polls ``check`` every millisecond; returns the monotonic time it first held."""
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {TIMEOUT_S:.0f} s")
        time.sleep(0.001)
    return time.monotonic()


def paused(member: Member, kept: set[int], began: float, done: float) -> float:
    """How long, between ``began`` and ``done``, ``member`` did not own all of ``kept`` (the
    partitions it owns before and after: with an eager protocol it stops on them too)."""
    total, since = 0.0, None
    for when, owned in member.events:
        if when < began or when > done:
            continue
        if since is None and not kept <= owned:
            since = when
        elif since is not None and kept <= owned:
            total, since = total + when - since, None
    return total + (done - since if since is not None else 0.0)


def new_group(admin: AdminClient, variant: Variant) -> str:
    group = f"rebalance-{variant.name}-{uuid.uuid4().hex[:8]}"
    if variant.group_config:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in variant.group_config.items()
        ]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=10)
    return group


def split(a: Member, b: Member) -> Callable[[], bool]:
    def check() -> bool:
        mine, theirs = a.snapshot(), b.snapshot()
        return bool(mine) and bool(theirs) and mine | theirs == EVERY and not mine & theirs

    return check


def joined(
    settings: Settings, topic: str, group: str, variant: Variant, instances: tuple[str, str] | None
) -> tuple[Member, Member, float, float]:
    """A owns every partition, then B joins: returns both, when B started and when split."""
    a_id, b_id = instances or (None, None)
    a = Member(settings, topic, group, variant.config, a_id)
    a.start()
    wait_until(lambda: a.snapshot() == EVERY, what=f"{variant.name}: A owns all")
    b = Member(settings, topic, group, variant.config, b_id)
    began = time.monotonic()
    b.start()
    done = wait_until(split(a, b), what=f"{variant.name}: join")
    return a, b, began, done


def one_round(settings: Settings, admin: AdminClient, topic: str, variant: Variant) -> None:
    """Dynamic members: join, then leave (see the module doc)."""
    a, b, began, done = joined(settings, topic, new_group(admin, variant), variant, None)
    variant.join_s.append(done - began)
    variant.paused_s.append(paused(a, a.snapshot(), began, done))
    time.sleep(0.5)  # let a late assignment callback of A arrive (reported, not timed)
    variant.reassigned.append(a.assigns_after_revoke > 0)
    b.leave()
    wait_until(lambda: b.closing_at > 0, what=f"{variant.name}: B stops polling")
    done = wait_until(lambda: a.snapshot() == EVERY, what=f"{variant.name}: leave")
    variant.leave_s.append(done - b.closing_at)
    b.join()
    a.leave()
    a.join()


def restart_round(settings: Settings, admin: AdminClient, topic: str, variant: Variant) -> None:
    """Static members (``group.instance.id``): B closes and a new B with the same id starts;
    timed from its start until it owns B's partitions again beside A."""
    group = new_group(admin, variant)
    a, b, _, _ = joined(settings, topic, group, variant, ("a", "b"))
    b.leave()
    b.join()
    b2 = Member(settings, topic, group, variant.config, "b")
    began = time.monotonic()
    b2.start()
    done = wait_until(split(a, b2), what=f"{variant.name}: restart")
    variant.restart_s.append(done - began)
    for member in (b2, a):
        member.leave()
        member.join()


def run(bootstrap: str, repeat: int) -> list[Variant]:
    settings = Settings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    variants = [
        Variant("classic", CLASSIC),
        Variant("consumer-default", CONSUMER, static=False),
        Variant("consumer-1s", CONSUMER, FAST_GROUP),
    ]
    one_round(settings, admin, topic, Variant("warm-up", CLASSIC))
    for _ in range(repeat):
        for variant in variants:
            one_round(settings, admin, topic, variant)
            if variant.static:
                restart_round(settings, admin, topic, variant)
    return variants


def report(variants: list[Variant]) -> None:
    def figures(values: list[float]) -> str:
        if not values:
            return "-"
        each = " ".join(f"{v:.2f}" for v in values)
        return f"median {statistics.median(values):.2f} s  ({each})"

    for v in variants:
        print(f"{v.name}")
        print(f"  join                      {figures(v.join_s)}")
        print(f"  A paused on kept parts    {figures(v.paused_s)}")
        print(f"  leave                     {figures(v.leave_s)}")
        print(f"  static member restart     {figures(v.restart_s)}")
        print(f"  A told of its assignment after a revoke: {v.reassigned}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.bootstrap:
        report(run(args.bootstrap, args.repeat))
        return
    with tempfile.TemporaryDirectory(prefix="rebalance-") as home:
        port = processes.free_port()
        broker = KafkaBroker(home=Path(home), port=port, controller_port=processes.free_port())
        broker.start()
        try:
            report(run(broker.bootstrap, args.repeat))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
