"""Replay and explain throughput, against a bare consume + decode loop in the same run.

``replay``: N ``TimelineTransition`` events of one table (requested, inflight, completed per
instant; N = 1,000,002 by default, ``--events`` to choose, 30k with ``--quick``) are produced
once to a timeline topic of this run; then, in rotated rounds, the bare floor (assign, consume
to the high watermark, decode every message: the same librdkafka fetch settings, batch size
and codec as the history's reader, with nothing else per message) and the replay's topic side
(``replay_timeline``: each ``consume`` batch folded into a ``TopicReplay``, entries rebuilt
and folded by the lean fold and the state machine while the topic is read, in
``batch_mode``, as ``lakewarden replay`` runs them) read them all. Twice: with the three
payload texts of a write that repeat (what the payload cache shares), with payloads that
never repeat (each instant writes its own file group: every payload is validated), and as a
streaming ingestion's history (every payload its own, the ``requested`` one too: it names
the Spark job and the micro-batch, as ``lakewarden.spark`` writes it). The goal: at least
100k events/s (the row's ``budget``); the ratio to the floor is reported, not bounded.
Peak memory: the RSS growth over the call, sampled every 20 ms.
The diff against storage is left out: it reads N timeline files, which the timeline
benchmark measures.

``explain``: what ``lakewarden explain`` does for a table with 10k instants (30k timeline
events on a topic of their own, one instant a minute, each event stamped with its time as a
real one would be): read every topic of the table in the instant's window (from
``EXPLAIN_LEAD_MS`` before the instant to ``EXPLAIN_TRAIL_MS`` after its terminal entry),
fold the history, explain the instant; for the newest instant and for the oldest (its
window must stop well before the end of the topic), against the bare consume + decode loop over the
whole topic; budget 2 s. ``explain in memory`` is the fold and
``explain`` alone over the decoded events, against decoding them: the part of the time that
is the history's own.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import timed_rounds
from lakewarden.events import default_codec, ensure_topics, make_event
from lakewarden.events.codec import epoch_ms_codec
from lakewarden.events.topics import TIMELINE
from lakewarden.history import (
    Recorded,
    TopicReplay,
    batch_mode,
    build_history,
    explain,
    explain_window,
    read_table_events,
    replay_timeline,
)
from lakewarden.history.reader import BULK_READ_CONFIG, READ_BATCH
from lakewarden.settings import Settings
from lakewarden.table.instant import Instant
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.testing.payloads import file_group_payloads, streaming_requested

_TIMEOUT_S = 30.0
_TABLE = "5f1f7b0e-2a9c-4a51-9d7e-0c6a3b1e9f42"
_REQUESTED = {"operation": "insert", "cancellable": False, "plan": None}
_INFLIGHT = WorkloadProfile(operation="insert", file_groups=()).model_dump(mode="json")
_COMPLETED = CommitStats(operation="insert", write_stats=()).model_dump(mode="json")
_QUIET = {"logger": logging.getLogger(__name__)}


_START_MS = Instant.parse("20250101000000000").epoch_ms
# One instant a minute (a busy streaming table): 10k instants are a week of history.
_SPACING_MS = 60_000


def _instant(i: int) -> str:
    return str(Instant.from_epoch_ms(_START_MS + i * _SPACING_MS))


# What each instant's payloads are in a run (``_values``): the metric names them.
PAYLOAD_KINDS: dict[str, str] = {
    "repeat": "3 payload texts that repeat",
    "unique": "payloads that never repeat",
    "streaming": "a streaming ingestion's payloads (requested ones never repeat either)",
}


def _values(instants: int, *, payloads: str = "repeat") -> list[tuple[bytes, int]]:
    """The encoded events of ``instants`` instants, each requested -> inflight -> completed,
    with the Kafka timestamp each would have had (its instant time, plus 10 ms a step);
    ``payloads`` (``PAYLOAD_KINDS``): ``unique``, the inflight and completed payloads of
    every instant differ; ``streaming``, the requested one too."""
    codec = default_codec()
    values = []
    for i in range(instants):
        instant = _instant(i)
        inflight, completed = (
            (_INFLIGHT, _COMPLETED) if payloads == "repeat" else file_group_payloads(i, instant)
        )
        requested = streaming_requested(i) if payloads == "streaming" else _REQUESTED
        for step, (transition, payload) in enumerate(
            (("requested", requested), ("inflight", inflight), ("completed", completed))
        ):
            record = make_event(
                "TimelineTransition",
                table_id=_TABLE,
                producer_id="bench",
                seq=3 * i + step,
                instant=instant,
                action="commit",
                transition=transition,
                actor="bench-writer",
                lock_token=3 * i + step + 1,
                wall_time=_START_MS + i * _SPACING_MS + 10 * step,
                payload=json.dumps(payload, sort_keys=True),
            )
            stamp = _START_MS + i * _SPACING_MS + 10 * step
            values.append((codec.encode("TimelineTransition", record), stamp))
    return values


@benchmark("replay", "replay's topic side and explain vs a bare consume + decode loop")
def replay(ctx: BenchContext) -> Iterator[Result]:
    base = ctx.kafka_settings()
    instants = (ctx.events or ctx.scale(1_000_002, 30_000)) // 3
    for payloads in PAYLOAD_KINDS:
        yield from _replay_rounds(ctx, base, instants, payloads=payloads)
    explain_instants = ctx.scale(10_000, 2_000)
    yield from _explain_from_kafka(base, explain_instants)
    yield _explain_result(explain_instants)


def _replay_rounds(
    ctx: BenchContext, base: Settings, instants: int, *, payloads: str
) -> list[Result]:
    kafka = base.kafka.model_copy(
        update={"topic_prefix": f"lakewarden.bench-{uuid.uuid4().hex[:8]}."}
    )
    settings = base.model_copy(update={"kafka": kafka})
    values = _values(instants, payloads=payloads)
    ensure_topics(settings, specs=[TIMELINE])
    peaks: dict[str, list[int]] = {"floor": [], "replay": []}
    # CPU time of this process beside the wall time: on a shared machine the load inflates
    # the wall time of both sides, and the broker's share of it is in neither.
    cpu: dict[str, list[float]] = {"floor": [], "replay": []}
    # And of the child processes waited for during the call: replay's payload checker
    # (``lakewarden.history._validate``); a CPU ratio without it would flatter replay.
    child_cpu: dict[str, list[float]] = {"floor": [], "replay": []}

    def measured(name: str, run: Callable[[Settings], int]) -> Callable[[int], int]:
        def call(_: int) -> int:
            started, children = time.process_time(), _children_cpu()
            result, peak = _peak_rss_growth(lambda: run(settings))
            cpu[name].append(time.process_time() - started)
            child_cpu[name].append(_children_cpu() - children)
            peaks[name].append(peak)
            return result

        return call

    try:
        _produce(settings, values)
        del values  # not held while measuring memory
        times = timed_rounds(
            ctx.scale(3, 2),
            {"floor": measured("floor", _floor), "replay": measured("replay", _replay)},
            collect=True,
        )
    finally:
        _delete(settings)
    n = 3 * instants
    kind = PAYLOAD_KINDS[payloads]
    floor_s, replay_s = statistics.median(times["floor"]), statistics.median(times["replay"])
    mb = 1024 * 1024
    return [
        Result(
            benchmark="replay",
            metric=f"replay of {n} timeline events, {kind}",
            unit="events/s",
            value=n / replay_s,
            baseline=n / floor_s,
            baseline_label="bare consume + decode loop",
            lower_is_better=False,
            budget=100_000.0 if n >= 1_000_000 else None,
            details={
                "floor_s": times["floor"],
                "replay_s": times["replay"],
                "floor_cpu_s": cpu["floor"],
                "replay_cpu_s": cpu["replay"],
                "replay_child_cpu_s": child_cpu["replay"],
                "floor_child_cpu_s": child_cpu["floor"],
                # Replay's CPU with its child's (the payload checker) against the floor's.
                "cpu_ratio": statistics.median(
                    [c + k for c, k in zip(cpu["replay"], child_cpu["replay"], strict=True)]
                )
                / statistics.median(cpu["floor"]),
                "cpu_ratio_main_only": statistics.median(cpu["replay"])
                / statistics.median(cpu["floor"]),
                "replay_events_per_cpu_s": n / statistics.median(cpu["replay"]),
                "replay_events_per_cpu_s_with_child": n
                / statistics.median(
                    [c + k for c, k in zip(cpu["replay"], child_cpu["replay"], strict=True)]
                ),
                "load_average": os.getloadavg(),
            },
        ),
        Result(
            benchmark="replay",
            metric=f"replay of {n} timeline events, {kind}: peak RSS growth",
            unit="MB",
            value=statistics.median(peaks["replay"]) / mb,
            baseline=max(statistics.median(peaks["floor"]) / mb, 1.0),
            baseline_label="the bare loop's",
            details={
                "replay_mb": [p / mb for p in peaks["replay"]],
                "floor_mb": [p / mb for p in peaks["floor"]],
            },
        ),
    ]


_T = TypeVar("_T")


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children that were waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_growth(run: Callable[[], _T]) -> tuple[_T, int]:
    """``run()`` and the most its process's resident set grew over it (bytes), sampled
    every 20 ms from ``/proc/self/statm`` (Linux; 0 elsewhere)."""
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        try:
            with open("/proc/self/statm", "rb") as statm:
                return int(statm.read().split()[1]) * page
        except OSError:
            return 0

    before = rss()
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = run()
    finally:
        done.set()
        sampler.join()
    return result, max(peak, rss()) - before


def _produce(settings: Settings, values: list[tuple[bytes, int]]) -> None:
    producer = Producer(
        settings.kafka.librdkafka_config(linger_ms=20, batch_num_messages=10_000, **_QUIET)
    )
    topic = TIMELINE.name(settings)
    for value, stamp in values:
        while True:
            try:
                producer.produce(topic, value, key=_TABLE.encode(), timestamp=stamp)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(_TIMEOUT_S * 4):
        raise TimeoutError("replay benchmark: events not delivered")


def _floor(settings: Settings) -> int:
    """Consume every message of the topic to its high watermark and decode it: the best
    bare loop (the reader's fetch settings and batch size, the codec it decodes with; the
    partitions' ends checked once a batch, not per message)."""
    decode = epoch_ms_codec().decode
    topic = TIMELINE.name(settings)
    consumer = Consumer(
        settings.kafka.librdkafka_config(
            group_id=f"bench-{uuid.uuid4()}",
            enable_auto_commit=False,
            **BULK_READ_CONFIG,
            **_QUIET,
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics[topic].partitions
        ends = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        decoded, unread = 0, sum(ends.values())
        while ends:
            for msg in consumer.consume(min(READ_BATCH, max(1, unread)), timeout=1.0):
                if msg.error() is None:
                    decode(msg.value() or b"")
                    decoded += 1
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            unread = 0
            for tp in positions:
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
                else:
                    unread += ends[tp.partition] - max(tp.offset, 0)
        return decoded
    finally:
        consumer.close()


def _replay(settings: Settings) -> int:
    """What ``lakewarden replay`` does with the timeline topic: the entries rebuilt and
    folded while it is read (``replay_timeline``: from 50k messages on, the inflight and
    completed payloads validated by a second process, whose verdict the read waits for),
    and the instants counted by state for the command's summary line (``summary``: the
    command builds no instant state and no payload model, so neither does this)."""
    with batch_mode():
        topic = TopicReplay()
        problems = replay_timeline(settings, _TABLE, topic, timeout_s=900)
        states = topic.summary().states
    if problems:
        raise AssertionError(f"replay benchmark: the read met {problems[:3]}")
    return sum(states.values())


def _explain_from_kafka(base: Settings, instants: int) -> list[Result]:
    """``lakewarden explain`` of the newest instant and of the oldest (it reads from
    ``EXPLAIN_LEAD_MS`` before the instant to ``EXPLAIN_TRAIL_MS`` after its terminal entry),
    each against the bare loop over the whole topic."""
    kafka = base.kafka.model_copy(
        update={"topic_prefix": f"lakewarden.bench-{uuid.uuid4().hex[:8]}."}
    )
    settings = base.model_copy(update={"kafka": kafka})
    newest, oldest = _instant(instants - 1), _instant(0)
    ensure_topics(settings, specs=[TIMELINE])

    def explained(instant: str) -> list[str]:
        # The window ``lakewarden explain`` reads: the terminal (completed) entry's time is
        # what the storage timeline tells it (``terminal_time_ms``); here the generator's.
        window = explain_window(instant, Instant.parse(instant).epoch_ms + 20)
        with batch_mode():  # every topic, as ``lakewarden explain`` reads and folds them
            events = read_table_events(
                settings,
                _TABLE,
                since_ms=window.since_ms,
                until_ms=window.until_ms,
                timeout_s=120,
            )
            lines = explain(build_history(_TABLE, events), instant)
        if "completed" not in lines[0]:
            raise AssertionError(f"explain of {instant} went wrong: {lines}")
        return lines

    try:
        _produce(settings, _values(instants))
        times = timed_rounds(
            3,
            {
                "floor": lambda _: _floor(settings),
                "newest": lambda _: explained(newest),
                "oldest": lambda _: explained(oldest),
            },
        )
    finally:
        _delete(settings)
    floor_s = statistics.median(times["floor"])
    return [
        Result(
            benchmark="replay",
            metric=f"explain from Kafka, {which} of {instants} instants",
            unit="s",
            value=statistics.median(times[which]),
            baseline=floor_s,
            baseline_label="bare consume + decode loop over the whole topic",
            budget=2.0 if instants >= 10_000 else None,
            details={"explain_s": times[which], "floor_s": times["floor"]},
        )
        for which in ("newest", "oldest")
    ]


def _explain_result(instants: int) -> Result:
    codec = default_codec()
    values = [value for value, _ in _values(instants)]
    last = _instant(instants - 1)

    def decoded() -> list[Recorded]:
        return [Recorded(*codec.decode(v)) for v in values]

    def explained() -> Any:
        with batch_mode():
            history = build_history(_TABLE, decoded())
            return explain(history, last)

    times = timed_rounds(3, {"decode": lambda _: decoded(), "explain": lambda _: explained()})
    explain_s, decode_s = statistics.median(times["explain"]), statistics.median(times["decode"])
    return Result(
        benchmark="replay",
        metric=f"explain in memory (decode + history + explain), {instants} instants",
        unit="s",
        value=explain_s,
        baseline=decode_s,
        baseline_label="decoding the same events",
        budget=2.0 if instants >= 10_000 else None,
        details={"events": len(values), "explain_s": times["explain"], "decode_s": times["decode"]},
    )


def _delete(settings: Settings) -> None:
    admin = AdminClient(settings.kafka.librdkafka_config(**_QUIET))
    for future in admin.delete_topics([TIMELINE.name(settings)]).values():
        future.result(_TIMEOUT_S)


__all__ = ["replay"]
