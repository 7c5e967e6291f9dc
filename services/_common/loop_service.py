"""What the services' plain confluent-kafka loops share: their Kafka clients and their start-up.

Every service is such a loop (``_common.__init__`` says why not faust, which most of them used
before). Each owns one consumer in a group, committing offsets by hand, and one idempotent
producer; each starts the same way (the dev stack's contract, ``_common.runner``):

1. logfmt logging; 2. its topics exist (else exit 2); 3. the loop runs until SIGTERM/SIGINT;
4. once its first assignment and recovery completed, the health endpoint listens;
5. a loop that stops on ``EventConsumerError`` (its consumer failed fatally: e.g. a static
   member fenced after a broker restart, which librdkafka never recovers from) is built
   again from scratch, as a restarted process would be, instead of serving on with a dead
   consumer (``RebuildingLoop``).

The handlers of cancel-manager, the cleaner, the publisher and job-committer are coroutines
(so unit tests drive them with ``asyncio.run``) in which nothing suspends: sends are
``producer.produce`` calls, blocking work runs inline (``inline``: on the loop's thread, or a
lane's), and the one wait, a registration made durable, polls the producer. A loop steps each
to its end itself (``run_to_end``), with no event loop; ``consumed`` turns a librdkafka
message into what a handler takes, and ``ProducedTopic`` is the dead letters' topic on the
loop's producer.

What differs between them is passed in: consumer settings that are a service's own choice
(where a new group starts, how partitions are assigned), the producer's linger, and the
health details. The defaults say what they have in common and why; the latency settings of
both clients are those every request/reply client uses (``lakewarden.events.latency``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from confluent_kafka import Message, Producer

from lakewarden.errors import LakewardenError, NonRetryableError
from lakewarden.events import (
    Event,
    EventCodec,
    EventConsumer,
    EventConsumerError,
    EventDecodeError,
    Undecodable,
    default_codec,
)
from lakewarden.events.latency import LOW_LATENCY_CONSUMER, LOW_LATENCY_PRODUCER
from lakewarden.events.producer import kafka_producer
from lakewarden.events.topics import DLQ, TopicSpec, ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.membership import Membership
from lakewarden_services._common.runner import run_loop_until_signalled
from lakewarden_services._common.settings import Group, ServiceSettings

__all__ = [
    "Consumed",
    "LoopState",
    "ProducingLoop",
    "HandlerSuspendedError",
    "LoopWorker",
    "Outbox",
    "ProducedTopic",
    "RebuildingLoop",
    "consumed",
    "inline",
    "loop_consumer",
    "loop_producer",
    "run_to_end",
    "serve_loop",
]

log = logging.getLogger(__name__)

# A member that stops heartbeating loses its partitions after 6 s (a restarted instance with a
# static id takes them back at once); beats every second keep a live member in the group.
_GROUP_TIMING: dict[str, Any] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 1_000}


def loop_consumer(
    settings: Settings,
    *,
    group_id: str,
    codec: EventCodec,
    group_instance_id: str | None,
    logger: logging.Logger,
    **config: Any,
) -> EventConsumer:
    """The service's consumer. Offsets are committed by the loop, only after what they cover
    is durable; a malformed event is dead-lettered by the loop too, in order with its other
    effects. ``config`` overrides the shared defaults: a new group reads from the earliest
    offset, with the group timing above and the low-latency fetch (a fetch returns as soon
    as an event arrives)."""
    chosen = {
        "auto_offset_reset": "earliest",
        **_GROUP_TIMING,
        **LOW_LATENCY_CONSUMER,
        "logger": logger,
        **config,
    }
    if group_instance_id:
        chosen["group_instance_id"] = group_instance_id
    return EventConsumer(
        settings, group_id=group_id, codec=codec, auto_commit=False, dead_letters=False, **chosen
    )


def loop_producer(settings: Settings, *, linger_ms: int, logger: logging.Logger) -> Producer:
    """The service's producer: idempotent, every send acknowledged by all in-sync replicas.
    ``linger_ms`` 0 where a client waits for each answer (librdkafka still batches what
    accumulates while a request to the broker is in flight; ``lakewarden.events.latency``)."""
    return kafka_producer(
        settings, logger=logger, **{**LOW_LATENCY_PRODUCER, "linger_ms": linger_ms}
    )


class LoopWorker(Protocol):
    """What ``serve_loop`` needs of a service's loop."""

    membership: Membership
    rebalances: int
    on_ready: Callable[[], None]

    def run(self, stop: threading.Event) -> None: ...


W = TypeVar("W", bound=LoopWorker)


def serve_loop(
    service: str,
    service_settings: ServiceSettings,
    *,
    settings: Settings,
    topics: Iterable[TopicSpec],
    build: Callable[[], W],
    details: Callable[[W], dict[str, Any]],
) -> NoReturn:
    """Run a loop service until SIGTERM/SIGINT (steps 1-4 of the module doc); exits the process.

    ``build`` makes the loop once the topics exist; ``details`` adds the running loop's own
    figures to its health body. Exits with status 2 when Kafka is not configured or the
    topics cannot be created, with 0 on a clean stop."""
    setup_logging(service, service_settings.log_level)  # 1.
    try:
        ensure_topics(settings, specs=topics)  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": service})
        raise SystemExit(2) from err
    started = time.monotonic()
    loop = RebuildingLoop(build, service=service)

    def probe() -> tuple[bool, dict[str, Any]]:
        worker = loop.worker
        healthy, membership = worker.membership.health()
        return healthy, {
            "service": service,
            **membership,
            "uptime_s": round(time.monotonic() - started, 1),
            "rebalances": worker.rebalances,
            "rebuilds": loop.rebuilds,
            **details(worker),
        }

    health = HealthServer(service_settings.health_port, probe)
    loop.on_ready = health.start  # 4.
    run_loop_until_signalled(service, loop.run, health)  # 3.


# How long a loop whose consumer failed fatally waits before it is built again: long enough
# not to spin against a broker that fences every new member, short against a session timeout.
REBUILD_DELAY_S = 1.0


class RebuildingLoop(Generic[W]):
    """The service's loop (``build()``), built again when it stops on ``EventConsumerError``
    (5.): ``worker`` is the one running, ``rebuilds`` how many times it was replaced.

    A fatal consumer error leaves librdkafka's consumer unusable for good: every poll and
    commit fails with ``_FATAL`` while the process looks alive. A new worker gets a new
    consumer (and producer), joins the group again and recovers its partitions' state from
    the changelogs, exactly as after a restart; offsets were only ever committed for
    durable work, so nothing is lost and the handlers' idempotence covers what is redone.
    """

    def __init__(
        self,
        build: Callable[[], W],
        *,
        service: str,
        delay_s: float = REBUILD_DELAY_S,
    ) -> None:
        self.build = build
        self.service = service
        self.delay_s = delay_s
        self.on_ready: Callable[[], None] = lambda: None  # 4., handed to every worker
        self.worker = build()
        self.rebuilds = 0

    def run(self, stop: threading.Event) -> None:
        """Run the worker until ``stop`` is set; after a fatal consumer error wait
        ``delay_s`` and run a new one."""
        while True:
            self.worker.on_ready = self.on_ready
            try:
                self.worker.run(stop)
                return
            except EventConsumerError as err:
                if stop.is_set():
                    return
                log.error(
                    "the loop's consumer failed; building the loop again: %s",
                    err,
                    extra={"service": self.service},
                )
            if stop.wait(self.delay_s):
                return
            self.worker = self.build()
            self.rebuilds += 1


@dataclass(frozen=True, slots=True)
class Consumed:
    """A consumed message as a handler takes it (``dlq.Message``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_s: float


def consumed(msg: Message, codec: EventCodec) -> tuple[Consumed, Any]:
    """``msg`` as a handler takes it, and its decoded value (``Undecodable`` when the codec
    cannot decode it: the handler dead-letters it)."""
    raw = msg.value() or b""
    value: Any
    try:
        value = codec.decode(raw)
    except EventDecodeError as err:
        value = Undecodable(err, raw)
    _, timestamp_ms = msg.timestamp()
    message = Consumed(
        str(msg.topic()),
        int(msg.partition() or 0),
        int(msg.offset() or 0),
        msg.key(),
        raw,
        timestamp_ms / 1000,
    )
    return message, value


class ProducedTopic:
    """What ``DeadLetters`` sends to, on a loop's producer: ``produce(topic, key, event)``."""

    def __init__(self, produce: Callable[[str, bytes | None, Event], None], topic: str) -> None:
        self._produce = produce
        self.topic = topic

    async def send(self, *, key: bytes | None, value: Event) -> None:
        self._produce(self.topic, key, value)


class HandlerSuspendedError(NonRetryableError):
    """A handler awaited something that suspends: it needs an event loop this loop has not."""


async def inline(func: Callable[[], Any]) -> Any:
    """A handler's ``run_blocking``: run ``func`` here (the loop's or a lane's thread is the
    service's worker; blocking there is the point)."""
    return func()


def run_to_end(step: Coroutine[Any, Any, None]) -> None:
    """Run a handler coroutine to its end on this thread (see the module doc).

    Raises:
        HandlerSuspendedError: it suspended (a bug: nothing would ever resume it).
    """
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise HandlerSuspendedError(
        "a loop service's handler awaited something that suspends; its work must be done "
        "inline or produced. Help: this is a bug in the service; report it with its log."
    )


class Outbox:
    """A loop's producer, with what its commits need: every message is handed to librdkafka
    with a delivery report, a failed delivery is remembered, and ``commit`` commits the
    consumer's stored offsets only once everything produced so far is durable."""

    def __init__(self, producer: Producer, *, timeout_s: float, logger: logging.Logger) -> None:
        self.producer = producer
        self.timeout_s = timeout_s
        self.log = logger
        self._failed: list[str] = []

    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        on_delivery: Callable[[Any, Message], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """Hand ``value`` to librdkafka; when its queue is full, wait for it once."""
        callback = on_delivery or self._on_delivery
        try:
            self.producer.produce(topic, value, on_delivery=callback, **kwargs)
        except BufferError:
            self.producer.flush(self.timeout_s)
            self.producer.produce(topic, value, on_delivery=callback, **kwargs)

    def _on_delivery(self, err: Any, msg: Message) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")
            self.log.error("delivery failed", extra={"kafka_topic": msg.topic(), "error": str(err)})

    def commit(self, consumer: EventConsumer) -> None:
        """Flush the producer, then commit ``consumer``'s stored offsets; nothing is
        committed past an undelivered message (its event is handled again)."""
        remaining = self.producer.flush(self.timeout_s)
        if remaining or self._failed:
            self.log.warning("not committing: %d messages undelivered", remaining)
            self._failed = []
            return
        try:
            consumer.commit()
        except EventConsumerError as err:
            self.log.warning("offset commit failed: %s", err)


POLL_S = 0.1
DRAIN = 100  # events taken at once when several are already there


class LoopState:
    """What every loop has: its settings, consumer group and codec, what it shows its health
    endpoint and how it becomes ready (``LoopWorker``: ``membership``, ``rebalances``, and
    ``on_ready``, called once, at the end of the first assignment: ``ready``)."""

    def __init__(
        self,
        settings: Settings,
        group: Group,
        *,
        codec: EventCodec | None,
        on_ready: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.group_id = group.id
        self.group = group
        self.codec = codec or default_codec()
        self.on_ready = on_ready
        self.membership = Membership()
        self.rebalances = 0

    def group_consumer(self, logger: logging.Logger, **config: Any) -> EventConsumer:
        """The loop's consumer in its group (``loop_consumer``; ``config`` its own choices)."""
        return loop_consumer(
            self.settings,
            group_id=self.group.id,
            codec=self.codec,
            group_instance_id=self.group.instance_id,
            logger=logger,
            **config,
        )

    def ready(self) -> None:
        """An assignment (and its recovery) completed."""
        first = not self.membership.ready
        self.membership.assigned()
        if first:
            self.on_ready()


class ProducingLoop(LoopState):
    """A loop whose handlers answer through one producer (cancel-manager, job-committer, the
    table services): its consumer (``range`` assignment: partition P of every topic it
    follows, which share keys and partition counts, to one member), its producer (no linger:
    a client waits for each answer, or the loop for a registration), the ``Outbox`` that
    commits only past what is durable, and its dead letters."""

    def __init__(
        self,
        settings: Settings,
        group: Group,
        *,
        service: str,
        on_ready: Callable[[], None],
        codec: EventCodec | None,
        logger: logging.Logger,
    ) -> None:
        super().__init__(settings, group, codec=codec, on_ready=on_ready)
        self.consumer = self.group_consumer(logger, partition_assignment_strategy="range")
        self.producer = loop_producer(settings, linger_ms=0, logger=logger)
        self.outbox = Outbox(
            self.producer, timeout_s=settings.kafka.request_timeout_s, logger=logger
        )
        self.dead_letters = DeadLetters(
            ProducedTopic(self.produce, DLQ.name(settings)),
            service=service,
            consumer_group=group.id,
        )

    def polled(self) -> list[Message]:
        """Wait for an event (returns as soon as one arrives, or after ``POLL_S``) and take
        what else is already there."""
        msg = self.consumer.poll_message(POLL_S)
        return [] if msg is None else [msg, *self.consumer.consume(DRAIN, 0)]

    def produce(self, topic: str, key: bytes | None, event: Event) -> None:
        """Hand ``event`` to librdkafka (thread-safe)."""
        self.outbox.produce(topic, self.codec.encode(event.name, event.record), key=key)

    def sender(self, topic: str) -> Callable[[str, Event], Coroutine[Any, Any, None]]:
        """A handler's ``send_result`` / ``send_transition``: ``event`` keyed by its table."""

        async def send(table_id: str, event: Event) -> None:
            self.produce(topic, table_id.encode(), event)

        return send

    def commit(self) -> None:
        """Flush the producer, then commit the stored offsets (``Outbox.commit``)."""
        self.outbox.commit(self.consumer)

    def close(self) -> None:
        """Commit, leave the group, flush what is left."""
        try:
            self.commit()
            self.consumer.close()
        finally:
            self.producer.flush(self.settings.kafka.request_timeout_s)
