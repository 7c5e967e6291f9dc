"""job-committer's Kafka loop: one consumer, one producer, and two lanes (``_common.lanes``).

The loop's thread polls ``job.requests`` and ``task.manifests`` and hands each event to its
topic's lane: the commit lane runs one job commit at a time (``RequestHandler``: storage
calls, the table lock, renames in a thread pool), the manifest lane checks and holds
announced manifests (``ManifestHandler``). A commit request may wait for the manifests of its
attempts, which the manifest lane reads meanwhile; a commit that takes minutes holds up
neither the consumer's group session nor the manifests.

The group is ``<prefix>job-committer`` (the faust app id of the service's earlier versions,
so committed offsets carry over; writers ask whether it has a member before they send,
``lakewarden.clients.committer_presence``), static membership with ``LAKEWARDEN_INSTANCE_ID``,
``range`` assignment: both topics have the same partition count and key (the table id), so
one instance gets partition P of both and sees a table's manifests beside its requests.

Each turn:

1. wait for an event (returns as soon as one arrives), take what else is already there, and
   hand each to its lane;
2. pause a lane's partitions while too many of its events wait, resume them once it caught up;
3. every ``commit_interval_s``: take the offsets of the events the lanes finished, flush the
   producer (results, transitions, dead letters), then commit them. A request whose answer
   is not durable is delivered again after a crash and resumes (the handler is idempotent).

No state needs recovering on assignment (storage holds it; the held manifests are a cache);
on revocation the lanes drop what they had not started and finish what they had, and the
offsets are committed. A fatal consumer error ends the loop (the commit in progress finishes
first) and ``RebuildingLoop`` builds it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from confluent_kafka import Message, TopicPartition

from lakewarden.events import EventCodec
from lakewarden.events.topics import JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.lanes import Lane
from lakewarden_services._common.loop_service import (
    Consumed,
    ProducingLoop,
    consumed,
    inline,
    run_to_end,
)
from lakewarden_services._common.settings import Group
from lakewarden_services.job_committer.app import SERVICE
from lakewarden_services.job_committer.handler import ManifestHandler, RequestHandler
from lakewarden_services.job_committer.held import HeldManifests
from lakewarden_services.job_committer.worker import CommitWorker

__all__ = ["Loop"]

log = logging.getLogger(__name__)

_DRAIN: Final = 100  # events taken at once when several are already there
_POLL_S: Final = 0.1
# Events a lane holds before its partitions are paused: requests are one per Spark job (and
# may carry every write stat of the job), manifests one per task attempt.
_REQUESTS_HIGH: Final = 64
_MANIFESTS_HIGH: Final = 1024


def _stepped(
    handle: Callable[[Consumed, Any], Coroutine[Any, Any, None]],
) -> Callable[[Consumed, Any], None]:
    return lambda message, value: run_to_end(handle(message, value))


class Loop(ProducingLoop):
    """Runs job-committer until ``stop`` is set (see the module doc). ``worker`` and ``held``
    outlive the loop; ``on_ready`` is called once, after the first assignment."""

    def __init__(
        self,
        settings: Settings,
        worker: CommitWorker,
        held: HeldManifests,
        *,
        group: Group,
        commit_interval_s: float,
        manifest_wait_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
    ) -> None:
        super().__init__(
            settings, group, service=SERVICE, on_ready=on_ready, codec=codec, logger=log
        )
        self.commit_interval_s = commit_interval_s
        self.assigned: dict[str, list[TopicPartition]] = {}
        requests = RequestHandler(
            worker=worker,
            run_blocking=inline,  # the commit lane's thread: blocking there is the point
            send_result=self.sender(JOB_RESULTS.name(settings)),
            send_transition=self.sender(TIMELINE.name(settings)),
            dead_letters=self.dead_letters,
            producer_id=SERVICE,
            held=held,
            manifest_wait_s=manifest_wait_s,
        )
        manifests = ManifestHandler(
            settings=settings, run_blocking=inline, dead_letters=self.dead_letters, held=held
        )
        self.lanes = {
            JOB_REQUESTS.name(settings): Lane(
                "job-commit", _stepped(requests.handle), high_water=_REQUESTS_HIGH
            ),
            TASK_MANIFESTS.name(settings): Lane(
                "manifest-check", _stepped(manifests.handle), high_water=_MANIFESTS_HIGH
            ),
        }

    def pending(self) -> dict[str, int]:
        """Events waiting in each lane (the health body)."""
        return {f"{lane.name}_pending": lane.pending() for lane in self.lanes.values()}

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then finish, commit, close.

        Raises:
            EventConsumerError: the consumer failed fatally.
        """
        self.consumer.subscribe(
            list(self.lanes),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        for lane in self.lanes.values():
            lane.start()
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                msg = self.consumer.poll_message(_POLL_S)  # 1.
                if msg is not None:
                    for each in [msg, *self.consumer.consume(_DRAIN, 0)]:
                        self._dispatch(each)
                self.producer.poll(0)  # delivery reports
                for topic, lane in self.lanes.items():
                    lane.flow(self.consumer, self.assigned.get(topic, []))  # 2.
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self.commit()  # 3.
                    last_commit = time.monotonic()
        finally:
            for lane in self.lanes.values():
                lane.stop()  # the event in progress is finished and answered first
            self.close()

    def _dispatch(self, msg: Message) -> None:
        message, value = consumed(msg, self.codec)
        self.lanes[message.topic].put(message, value)

    def commit(self) -> None:
        """3.: the offsets taken before the flush, so each one's answers are in it."""
        self.consumer.store_offsets([tp for lane in self.lanes.values() for tp in lane.take_done()])
        super().commit()

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.assigned = {
            topic: [tp for tp in partitions if tp.topic == topic] for topic in self.lanes
        }
        for lane in self.lanes.values():
            lane.paused = False  # a partition assigned again fetches
        log.info(
            "partitions assigned",
            extra={"partitions": sorted({tp.partition for tp in partitions}), "service": SERVICE},
        )
        self.ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.membership.revoked()
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        for lane in self.lanes.values():
            lane.settle(revoked)
        self.commit()
        self.assigned = {}

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        lost = {(tp.topic, tp.partition) for tp in partitions}
        for lane in self.lanes.values():
            lane.settle(lost)
            lane.forget_done(lost)
        self.assigned = {}
