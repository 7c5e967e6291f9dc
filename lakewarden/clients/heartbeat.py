"""The heartbeat emitter: proof, on ``lakewarden.heartbeats``, that an instant is being worked on.

    with Heartbeat(settings, table_id, instant, owner=me) as heartbeat:
        ... write files ...
        heartbeat.check()        # raises HeartbeatLostError: do not complete the instant
        transaction.complete(stats)

A thread publishes a beat every ``interval_s``; heartbeat-monitor declares the instant dead
when no beat reached the broker for ``tolerance_s = interval_s * tolerable_misses`` (judged by
broker time). The emitter judges itself by the same rule, conservatively: it is *healthy* while
some beat *sent* less than ``tolerance_s`` ago has been acknowledged by the broker. A beat is
appended after it was sent, so while the emitter is healthy the monitor cannot have seen a
silence longer than the tolerance, whatever the clocks say.

Losing health is sticky: once the window passed without an acknowledged beat, the monitor may
have declared the instant dead (and the cleaner may be rolling it back), so the emitter stays
unhealthy even if later beats get through. The thread cannot die silently: whatever stops it
(an exception, a fatal producer error) makes the emitter unhealthy at once, and the holder is
told three ways: ``is_healthy()`` is false, ``check()`` raises ``HeartbeatLostError`` naming
the cause, and the ``on_lost`` callback (if given) is called once, from the heartbeat thread
(or, when that thread is gone, from the holder's next ``is_healthy()`` / ``check()``).

Beats that cannot be delivered within one interval (1 s at least) are dropped by the producer
rather than delivered late (a late beat would be a false sign of life). Leaving the ``with``
block sends a ``final`` beat, so the monitor stops tracking the instant without declaring it
dead.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Literal

from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.errors import NonRetryableError
from lakewarden.events.codec import EventCodec, default_codec
from lakewarden.events.envelope import new_envelope
from lakewarden.events.producer import kafka_producer, producer_config
from lakewarden.events.topics import HEARTBEATS
from lakewarden.extras import missing_extra
from lakewarden.settings import HeartbeatPolicy, Settings

try:
    from confluent_kafka import KafkaError, KafkaException, Message, Producer
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

BeatKind = Literal["beat", "final"]
# How long leaving the block may wait for the final beat: it is a courtesy (without it the
# monitor declares the instant dead after the tolerance), not worth holding a writer up for.
_FINAL_FLUSH_S: Final = 1.0
# The thread's longest sleep: bounds how late it notices the window passing or a stop request.
_MAX_WAIT_S: Final = 0.1
# Its sleep until the first beat is acknowledged: ``start`` (and with it the holder's work)
# waits for that acknowledgement, which is only seen when the thread polls the producer; at
# the longest sleep every start would take 100 ms whatever the broker's answer time.
_FIRST_ANSWER_WAIT_S: Final = 0.002


class HeartbeatLostError(NonRetryableError):
    """The heartbeat of an instant is unhealthy: heartbeat-monitor may have declared it dead,
    so the instant must not complete. ``cause`` is why (window passed, thread failed)."""

    def __init__(self, message: str, *, table: str, instant: str, cause: str) -> None:
        super().__init__(message, table=table, instant=instant)
        self.cause = cause


class Heartbeat:
    """Publishes heartbeats for one instant from a background thread (see the module doc).

    ``interval_s`` / ``tolerable_misses`` default to ``settings.heartbeat.policy_for(table_id)``.
    ``producer_config`` overrides librdkafka settings (underscores for dots). ``clock`` times
    the beats and the window (tests pass ``lakewarden.testing.ManualClock``). No network IO
    happens before ``start()`` / ``__enter__``.
    """

    def __init__(
        self,
        settings: Settings,
        table_id: str,
        instant: str,
        owner: str,
        *,
        interval_s: float | None = None,
        tolerable_misses: int | None = None,
        on_lost: Callable[[HeartbeatLostError], None] | None = None,
        codec: EventCodec | None = None,
        clock: Clock = SYSTEM_CLOCK,
        **producer_config: Any,
    ) -> None:
        policy = settings.heartbeat.policy_for(table_id)
        self.policy = HeartbeatPolicy(
            interval_s=policy.interval_s if interval_s is None else interval_s,
            tolerable_misses=(
                policy.tolerable_misses if tolerable_misses is None else tolerable_misses
            ),
        )
        self.settings = settings
        self.table_id = table_id
        self.instant = instant
        self.owner = owner
        self._on_lost = on_lost
        self._codec = codec or default_codec()
        self._clock = clock
        self._producer_config = producer_config
        self._producer: Producer | None = None
        self._shared: Producer | None = None  # another's producer (``share``)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._started_at = 0.0
        self._last_acked_sent_at: float | None = None
        self._lost: HeartbeatLostError | None = None
        self._first_answer = threading.Event()  # the first beat acknowledged, or health lost
        self._notified = False
        self.sent = 0
        self.delivered = 0
        self.failed = 0

    @property
    def tolerance_s(self) -> float:
        return self.policy.tolerance_s

    def share(self, producer: Producer) -> None:
        """Beat through ``producer``, which its owner keeps open (``Heartbeats``), instead of
        a producer of this heartbeat's own. Call before ``start``."""
        if self._thread is not None:
            raise RuntimeError("share() comes before start()")
        self._shared = producer

    def start(self, *, wait_first_s: float | None = None) -> Heartbeat:
        """Start beating; wait until the first beat is acknowledged (at most ``wait_first_s``,
        default the tolerance), so the monitor knows the instant before any work starts.

        Raises:
            HeartbeatLostError: the first beat was not acknowledged in time.
            RuntimeError: already started.
        """
        if self._thread is not None:
            raise RuntimeError("this Heartbeat was started already")
        self._producer = self._shared or kafka_producer(
            self.settings, logger=log, **self.producer_options()
        )
        self._started_at = self._clock.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{self.table_id}-{self.instant}", daemon=True
        )
        self._thread.start()
        wait_s = self.tolerance_s if wait_first_s is None else wait_first_s
        self._clock.wait(self._first_answer, self._started_at + wait_s)
        if self.delivered == 0:
            self._declare_lost("first_beat", "the first heartbeat was not acknowledged")
            self.stop()
            self.check()
        return self

    def stop(self) -> None:
        """Stop beating and send a ``final`` beat (best effort, bounded wait). Idempotent."""
        thread = self._thread
        if thread is None or self._stop.is_set():
            return
        self._stop.set()
        thread.join()
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            self._produce(producer, "final")
            # Waited for (bounded) even on a shared producer: a process may exit right after
            # the block, and the monitor must not see a finished instant's beats just stop.
            remaining = producer.flush(_FINAL_FLUSH_S)
        except Exception:  # a courtesy: leaving the block must not fail because of it
            log.exception("final heartbeat failed", extra={"instant": self.instant})
            return
        if remaining:
            log.info(
                "final heartbeat not delivered",
                extra={"table_id": self.table_id, "instant": self.instant},
            )

    def is_healthy(self) -> bool:
        """True while a beat sent within the last ``tolerance_s`` was acknowledged and the
        thread runs. Once false, false for good (see the module doc)."""
        self._judge(self._clock.monotonic())
        return self._lost is None

    def check(self) -> None:
        """Return if healthy.

        Raises:
            HeartbeatLostError: unhealthy, with the cause; the instant must not complete.
        """
        self._judge(self._clock.monotonic())
        if self._lost is not None:
            raise self._lost

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._beat_until_stopped()
        except BaseException as err:  # the thread must not die silently, whatever killed it
            log.exception("heartbeat thread failed", extra={"instant": self.instant})
            self._declare_lost("thread_failed", f"the heartbeat thread failed: {err!r}")
            self._notify()

    def _beat_until_stopped(self) -> None:
        producer = self._producer
        assert producer is not None, "started"
        interval = self.policy.interval_s
        clock = self._clock
        next_beat = clock.monotonic()
        while not self._stop.is_set():
            now = clock.monotonic()
            if now >= next_beat:
                self._produce(producer, "beat")
                # A late wake-up (GC pause, CPU starvation) does not queue a burst of beats.
                next_beat = max(next_beat + interval, now + interval / 2)
            producer.poll(0)  # delivery callbacks run here, on this thread
            self._judge(clock.monotonic())
            self._notify()
            sleep = _MAX_WAIT_S if self._first_answer.is_set() else _FIRST_ANSWER_WAIT_S
            clock.wait(self._stop, min(next_beat, clock.monotonic() + sleep))
        producer.poll(0)

    def _produce(self, producer: Producer, kind: BeatKind) -> None:
        record = {
            "envelope": new_envelope(
                "Heartbeat", table_id=self.table_id, producer_id=self.owner, codec=self._codec
            ),
            "instant": self.instant,
            "owner": self.owner,
            "interval_ms": round(self.policy.interval_s * 1000),
            "seq": self.sent,
            "kind": kind,
            "tolerable_misses": self.policy.tolerable_misses,
        }
        sent_at = self._clock.monotonic()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._on_delivery(err, sent_at)

        try:
            producer.produce(
                HEARTBEATS.name(self.settings),
                self._codec.encode("Heartbeat", record),
                key=self.table_id.encode(),
                on_delivery=delivered,
            )
            self.sent += 1
        except BufferError:
            # The local queue is full of undelivered beats: this one would be late anyway.
            self.failed += 1

    def _on_delivery(self, err: KafkaError | None, sent_at: float) -> None:
        if err is not None:
            self.failed += 1
            if err.fatal():
                self._declare_lost("producer_fatal", f"the heartbeat producer failed: {err}")
            return
        self.delivered += 1
        self._first_answer.set()
        with self._guard:
            previous = self._last_acked_sent_at
            reference = self._started_at if previous is None else previous
            # A gap longer than the tolerance between acknowledged beats is a window the monitor
            # may have judged, even if the window is over by now.
            if sent_at - reference > self.tolerance_s:
                gap = sent_at - reference
                self._declare_lost_locked(
                    "window_passed", f"no heartbeat was delivered for {gap:.1f} s"
                )
            if previous is None or sent_at > previous:
                self._last_acked_sent_at = sent_at

    def _judge(self, now: float) -> None:
        """Lose health when the window passed or the thread is gone."""
        if self._lost is not None or self._thread is None:
            return
        with self._guard:
            reference = self._last_acked_sent_at or self._started_at
            silence = now - reference
        if silence > self.tolerance_s and self._last_acked_sent_at is None:
            self._declare_lost("first_beat", "the first heartbeat was not acknowledged")
        elif silence > self.tolerance_s:
            self._declare_lost("window_passed", f"no heartbeat was delivered for {silence:.1f} s")
        elif not self._thread.is_alive() and not self._stop.is_set():
            self._declare_lost("thread_failed", "the heartbeat thread is not running")
            self._notify()  # nobody else will: the thread is gone

    def _declare_lost(self, cause: str, what: str) -> None:
        with self._guard:
            self._declare_lost_locked(cause, what)

    def _declare_lost_locked(self, cause: str, what: str) -> None:
        if self._lost is not None:
            return
        self._lost = HeartbeatLostError(
            f"heartbeat of instant {self.instant} of table {self.table_id} is lost: {what} "
            f"(tolerance {self.tolerance_s:g} s), so heartbeat-monitor may have declared it "
            "dead. Help: do not complete the instant; roll it back and write again.",
            table=self.table_id,
            instant=self.instant,
            cause=cause,
        )
        log.error(
            "heartbeat lost: %s",
            what,
            extra={"table_id": self.table_id, "instant": self.instant, "cause": cause},
        )
        self._first_answer.set()  # start() need not wait any longer

    def _notify(self) -> None:
        """Call ``on_lost`` once, outside any lock, when health was lost."""
        with self._guard:
            error = self._lost
            if error is None or self._notified:
                return
            self._notified = True
        if self._on_lost is not None:
            try:
                self._on_lost(error)
            except Exception:  # the holder's callback must not stop the beats of others
                log.exception("on_lost callback failed")

    def _librdkafka_config(self) -> dict[str, Any]:
        return producer_config(self.settings, logger=log, **self.producer_options())

    def producer_options(self) -> dict[str, Any]:
        """The librdkafka settings of this heartbeat's producer (``kafka_producer``)."""
        # A beat that cannot be delivered within an interval (at least 1 s, so that a busy
        # broker does not fail every beat) is dropped rather than sent late. Not idempotent
        # (librdkafka's default).
        timeout_ms = max(round(self.policy.interval_s * 1000), 1000)
        return {
            "enable_idempotence": False,
            "linger_ms": 0,
            "message_timeout_ms": timeout_ms,
            "request_timeout_ms": timeout_ms,
            "client_id": f"heartbeat-{uuid.uuid4().hex[:8]}",
            **self._producer_config,
        }


class Heartbeats:
    """The heartbeats one process holds, by instant: what a ``Coordinator`` needs for its
    ``heartbeat`` hook, and the check a writer runs before completing an instant.

        beats = Heartbeats(settings)
        with beats.hold(table_id, instant, owner):     # Coordinator.heartbeat
            ...
            beats.check(table_id, instant)             # before appending ``completed``

    ``options`` are passed to every ``Heartbeat`` (``interval_s``, ``on_lost``, ...).
    Thread-safe.

    The heartbeats share one producer per producer configuration (one per heartbeat policy
    in practice), made at the first ``hold`` and kept until ``close``: a writer that opens an
    instant after another (a streaming query, one per micro-batch) would otherwise pay a
    producer's start and its connection to the broker before every write. Each instant is
    still proven alive on its own: its heartbeat's thread, its beats, and its first beat
    acknowledged before ``hold`` enters the block, and its final beat delivered (a bounded
    wait) before ``hold`` leaves it.
    """

    def __init__(self, settings: Settings, **options: Any) -> None:
        self.settings = settings
        self._options = options
        self._guard = threading.Lock()
        self._held: dict[tuple[str, str], Heartbeat] = {}
        self._producers: dict[str, Producer] = {}

    @contextmanager
    def hold(self, table_id: str, instant: str, owner: str) -> Iterator[Heartbeat]:
        """Beat for ``instant`` during the ``with`` block.

        Raises:
            HeartbeatLostError: the first beat was not acknowledged (broker unreachable).
            RuntimeError: this process already beats for the instant.
        """
        key = (table_id, instant)
        heartbeat = Heartbeat(self.settings, table_id, instant, owner, **self._options)
        with self._guard:
            if key in self._held:
                raise RuntimeError(f"already beating for instant {instant} of table {table_id}")
            heartbeat.share(self._producer_for(heartbeat))
            self._held[key] = heartbeat
        try:
            with heartbeat:
                yield heartbeat
        finally:
            with self._guard:
                self._held.pop(key, None)

    def connect(self) -> None:
        """Make the producer of the default heartbeat policy and connect it to the broker now,
        rather than in the first ``hold``: the first beat of a process's first instant would
        otherwise wait for a new producer's metadata and connection. A table with a policy
        of its own gets its producer at its first ``hold``. Never raises: what did not
        connect connects then."""
        with self._guard:
            producer = self._producer_for(Heartbeat(self.settings, "", "", "", **self._options))
        try:
            producer.list_topics(
                HEARTBEATS.name(self.settings), self.settings.kafka.request_timeout_s
            )
        except KafkaException as err:
            log.warning("heartbeat producer not connected yet: %s", err)

    def _producer_for(self, heartbeat: Heartbeat) -> Producer:
        """The shared producer of ``heartbeat``'s settings (made on first use; under
        ``_guard``)."""
        options = heartbeat.producer_options()
        options.pop("client_id")
        config = repr(sorted(options.items()))
        if config not in self._producers:
            self._producers[config] = kafka_producer(
                self.settings,
                logger=log,
                client_id=f"heartbeats-{uuid.uuid4().hex[:8]}",
                **options,
            )
        return self._producers[config]

    def close(self) -> None:
        """Deliver what the shared producers hold (final beats; bounded wait) and drop them:
        a later ``hold`` makes a new one."""
        with self._guard:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            try:
                producer.flush(_FINAL_FLUSH_S)
            except Exception:  # a courtesy, as the final beat is
                log.exception("flushing the heartbeat producer failed")

    def get(self, table_id: str, instant: str) -> Heartbeat | None:
        """The heartbeat held for the instant, if any."""
        with self._guard:
            return self._held.get((table_id, instant))

    def check(self, table_id: str, instant: str) -> None:
        """Return when the instant's heartbeat is healthy, or when none is held here (another
        process may be executing the instant: nothing to judge).

        Raises:
            HeartbeatLostError: the heartbeat held for the instant is lost.
        """
        heartbeat = self.get(table_id, instant)
        if heartbeat is not None:
            heartbeat.check()
