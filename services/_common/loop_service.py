"""What the plain confluent-kafka loop services share: their Kafka clients and their start-up.

timeline-lock, heartbeat-monitor and cancel-manager are loops rather than faust apps because
a client waits on their answers (or their judgement must not lag). Each owns one consumer in
a group, committing offsets by hand, and one idempotent producer; each starts the same way
(the dev stack's contract, ``lakewarden_services._common.runner``):

1. logfmt logging; 2. its topics exist (else exit 2); 3. the loop runs until SIGTERM/SIGINT;
4. once its first assignment and recovery completed, the health endpoint listens;
5. a loop that stops on ``EventConsumerError`` (its consumer failed fatally: e.g. a static
   member fenced after a broker restart, which librdkafka never recovers from) is built
   again from scratch, as a restarted process would be, instead of serving on with a dead
   consumer (``RebuildingLoop``).

What differs between them is passed in: consumer settings that are a service's own choice
(where a new group starts, how partitions are assigned), the producer's linger, and the
health details. The defaults say what they have in common and why; the latency settings of
both clients are those every request/reply client uses (``lakewarden.events.latency``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, Protocol

from confluent_kafka import Producer

from lakewarden.errors import LakewardenError
from lakewarden.events import EventCodec, EventConsumer, EventConsumerError
from lakewarden.events.latency import LOW_LATENCY_CONSUMER, LOW_LATENCY_PRODUCER
from lakewarden.events.producer import kafka_producer
from lakewarden.events.topics import TopicSpec, ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.app import ServiceSettings
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.membership import Membership
from lakewarden_services._common.runner import run_loop_until_signalled

__all__ = ["LoopWorker", "loop_consumer", "loop_producer", "serve_loop"]

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


def serve_loop(
    service: str,
    service_settings: ServiceSettings,
    *,
    settings: Settings,
    topics: Iterable[TopicSpec],
    build: Callable[[], LoopWorker],
    details: Callable[[], dict[str, Any]],
) -> NoReturn:
    """Run a loop service until SIGTERM/SIGINT (steps 1-4 of the module doc); exits the process.

    ``build`` makes the loop once the topics exist; ``details`` adds the service's own figures
    to its health body. Exits with status 2 when Kafka is not configured or the topics cannot
    be created, with 0 on a clean stop."""
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
            **details(),
        }

    health = HealthServer(service_settings.health_port, probe)
    loop.on_ready = health.start  # 4.
    run_loop_until_signalled(service, loop.run, health)  # 3.


# How long a loop whose consumer failed fatally waits before it is built again: long enough
# not to spin against a broker that fences every new member, short against a session timeout.
REBUILD_DELAY_S = 1.0


class RebuildingLoop:
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
        build: Callable[[], LoopWorker],
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
