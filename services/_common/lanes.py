"""Lanes: one topic's events handled in order on a thread of its own, beside the loop's
consumer (job-committer's commit requests and task manifests).

A job commit blocks for as long as its renames take (seconds to minutes), and a commit
request may wait for the ``TaskManifest`` events of its attempts, which arrive on the other
topic meanwhile. So the loop's thread only polls and hands each event to its topic's lane:
the consumer keeps its group session whatever a commit takes, and neither kind of work waits
behind the other. Each lane:

1. handles its events one at a time, in the order they were consumed (per partition, the
   order of the log);
2. records the next offset of an event's partition once its handling returned (its answers
   handed to the producer); the loop takes those offsets (``take_done``), flushes the
   producer, then commits them, so an offset is never committed before the answers of the
   events it covers are durable, and a request cut short by a crash is delivered again;
3. says how many events wait (``pending``; ``flow`` pauses the lane's partitions past
   ``high_water`` and resumes them at half of it), so a backlog stays in Kafka;
4. on revocation forgets the events of the revoked partitions it has not started (their next
   owner reads them again) and waits for the one in progress to finish (``settle``): its
   answer is sent and its offset committed before the partition moves.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from lakewarden.events import EventConsumer
from lakewarden_services._common.loop_service import Consumed

__all__ = ["Lane"]

log = logging.getLogger(__name__)

Where = tuple[str, int]  # (topic, partition)


class Lane:
    """One topic's events on the thread ``name`` (see the module doc); ``handle(message,
    value)`` handles one (a handler that dead-letters what it cannot use: an exception that
    reaches the lane is logged, and the event counts as done)."""

    def __init__(
        self, name: str, handle: Callable[[Consumed, Any], None], *, high_water: int
    ) -> None:
        self.name = name
        self.handle = handle
        self.high_water = high_water
        self.paused = False
        self._changed = threading.Condition()
        self._queue: deque[tuple[Consumed, Any]] = deque()
        self._busy: Where | None = None
        self._done: dict[Where, int] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def put(self, message: Consumed, value: Any) -> None:
        with self._changed:
            self._queue.append((message, value))
            self._changed.notify_all()

    def pending(self) -> int:
        """Events queued or in progress."""
        with self._changed:
            return len(self._queue) + (self._busy is not None)

    def take_done(self) -> list[TopicPartition]:
        """The next offset of every partition an event was handled of since the last call
        (2.)."""
        with self._changed:
            done, self._done = self._done, {}
        return [
            TopicPartition(topic, partition, offset) for (topic, partition), offset in done.items()
        ]

    def flow(self, consumer: EventConsumer, assigned: Sequence[TopicPartition]) -> None:
        """Pause the lane's ``assigned`` partitions past ``high_water`` events, resume them at
        half of it (3.)."""
        waiting = self.pending()
        if not self.paused and waiting >= self.high_water:
            consumer.pause(assigned)
            self.paused = True
        elif self.paused and waiting <= self.high_water // 2:
            consumer.resume(assigned)
            self.paused = False

    def settle(self, partitions: Collection[Where]) -> None:
        """Forget the queued events of ``partitions`` and wait until none of theirs is in
        progress (4.)."""
        with self._changed:
            self._queue = deque(item for item in self._queue if _where(item[0]) not in partitions)
            while self._busy is not None and self._busy in partitions:
                self._changed.wait()

    def forget_done(self, partitions: Collection[Where]) -> None:
        """Drop the offsets recorded for ``partitions`` (lost: no longer this member's)."""
        with self._changed:
            for where in partitions:
                self._done.pop(where, None)

    def stop(self) -> None:
        """Finish the event in progress, forget the rest, end the thread."""
        with self._changed:
            self._stopping = True
            self._queue.clear()
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._stopping:
                    self._changed.wait()
                if self._stopping:
                    return
                message, value = self._queue.popleft()
                self._busy = _where(message)
            try:
                self.handle(message, value)  # 1.
            except Exception:
                log.exception(
                    "%s: handling an event failed",
                    self.name,
                    extra={"kafka_offset": message.offset},
                )
            finally:
                with self._changed:
                    self._busy = None
                    self._done[_where(message)] = message.offset + 1  # 2.
                    self._changed.notify_all()


def _place(message: Consumed) -> dict[str, Any]:
    return {"kafka_partition": message.partition, "kafka_offset": message.offset}


def _where(message: Consumed) -> Where:
    return message.topic, message.partition
