"""What heartbeat-monitor's agents and timer do, apart from faust (tests drive it directly).

``Monitor.on_heartbeat`` takes one message of ``heartbeats``:

1. its broker timestamp advances its partition's clock, whatever the message is;
2. undecodable, not a Heartbeat, or an invalid one: dead-letter it and go on;
3. a tick: the monitor's own first tick after an assignment ends the partition's grace (the
   instants recovered from the liveness table are judged from then on);
4. a beat or a final beat: the tracker records it;
5. expiries: publish one ``HeartbeatExpired`` each and wait until the broker has them all;
6. then write the changed records to the liveness table (its changelog is the view).

Step 5 before 6: a crash in between re-declares the death after the restart (the record still
says alive), and the event id is derived from (table, instant), so the duplicate is recognisably
the same death. The other order could lose the expiry for good.

``Monitor.on_timeline`` takes one ``TimelineTransition``: a terminal one (completed, aborted,
rolled_back) makes the tracker forget the instant; its record is deleted while the agent
processes the next message of the instant's partition (at most a tick later), because a faust
table writes to the changelog partition of the event being processed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any, Final, Protocol

from faust.types import Message

from lakewarden.clients.liveness import LivenessRecord, parse_key, record_key
from lakewarden.events import Event, Undecodable, make_event, new_envelope
from services.heartbeat_monitor import metrics
from services.heartbeat_monitor.tracker import Beat, Expiry, Key, Outcome, Tracker

log = logging.getLogger(__name__)

TERMINAL: Final = frozenset({"completed", "aborted", "rolled_back"})
LOG_APPEND_TIME: Final = 1  # aiokafka's timestamp_type for broker-stamped messages
_INSTANT = re.compile(r"\d{17}")
# Deaths are one per (table, instant): the id of its HeartbeatExpired is derived from those.
_EXPIRY_NAMESPACE: Final = uuid.UUID("6f1c2a4e-53c9-4f0e-9d55-1b7f0b6c9a10")

SendExpired = Callable[[Expiry, dict[str, Any]], Awaitable[Awaitable[Any]]]


class DeadLetterSink(Protocol):
    async def undecodable(self, message: Message, value: Undecodable) -> None: ...

    async def reject(
        self, message: Message, *, reason: str, detail: str, error_type: str = ...
    ) -> None: ...


class InvalidHeartbeat(ValueError):
    """A decodable Heartbeat the monitor cannot use; ``reason`` goes into the dead letter."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def expiry_event_id(table_id: str, instant: str) -> str:
    """The event id of the one ``HeartbeatExpired`` of an instant."""
    return str(uuid.uuid5(_EXPIRY_NAMESPACE, f"{table_id}\n{instant}"))


class Monitor:
    """Feeds the tracker from consumed messages and applies what it decides."""

    def __init__(
        self,
        *,
        tracker: Tracker,
        table: MutableMapping[bytes, bytes],
        send_expired: SendExpired,
        dead_letters: DeadLetterSink,
        producer_id: str,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.tracker = tracker
        self.table = table
        self.send_expired = send_expired
        self.dead_letters = dead_letters
        self.producer_id = producer_id
        self.clock = clock
        self.last_broker_ms: int | None = None
        self.ticks_sent = 0

    async def on_heartbeat(self, message: Message, value: Any) -> None:
        """Process one message of ``heartbeats`` (see the module docstring)."""
        partition, broker_ms = message.partition, self._broker_ms(message)  # 1.
        self.last_broker_ms = broker_ms
        try:
            beat = self._parse(message, value, broker_ms)
        except InvalidHeartbeat as err:  # 2.
            await self._apply(self.tracker.advance(partition, broker_ms))
            if isinstance(value, Undecodable):
                await self.dead_letters.undecodable(message, value)
            else:
                await self.dead_letters.reject(message, reason=err.reason, detail=str(err))
            return
        if beat is None:  # 3. a tick
            metrics.BEATS.labels("tick").inc()
            outcome = self._tick(message, value.record, broker_ms)
        else:  # 4.
            metrics.BEATS.labels("final" if beat.final else "beat").inc()
            zombies = self.tracker.zombie_beats
            outcome = self.tracker.beat(beat)
            metrics.ZOMBIE_BEATS.inc(self.tracker.zombie_beats - zombies)
        await self._apply(outcome)

    async def on_timeline(self, message: Message, value: Any) -> None:
        """Process one message of ``timeline``: forget instants that reached a terminal state.
        Bad messages are dead-lettered."""
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)
            return
        name, record = value
        if name != "TimelineTransition":
            await self.dead_letters.reject(
                message, reason="unexpected_event", detail=f"{name} on the timeline topic"
            )
            return
        if record["transition"] in TERMINAL:
            metrics.TERMINAL.inc()
            self.tracker.finish(record["envelope"]["table_id"], record["instant"])

    def tick_record(self) -> Event:
        """The next tick this instance sends to a partition."""
        self.ticks_sent += 1
        record = {
            "envelope": new_envelope("Heartbeat", table_id="", producer_id=self.producer_id),
            "instant": "",
            "owner": self.tracker.instance_id,
            "interval_ms": 0,
            "seq": self.ticks_sent,
            "kind": "tick",
            "tolerable_misses": 1,
        }
        return Event("Heartbeat", record)

    def assigned(self, partitions: Iterable[int]) -> None:
        """Partitions of ``heartbeats`` newly assigned: each in grace until its floor."""
        self.tracker.assign(partitions, wall_ms=self.clock())

    def revoked(self, partitions: Iterable[int]) -> None:
        self.tracker.revoke(partitions)

    def _tick(self, message: Message, record: dict[str, Any], broker_ms: int) -> Outcome:
        partition = message.partition
        sent_ms = _epoch_ms(record["envelope"]["event_time"])
        outcome = Outcome()
        if self.tracker.accepts_floor(partition, sender=record["owner"], sent_wall_ms=sent_ms):
            outcome = self.tracker.end_grace(partition, broker_ms, self._records())
            log.info(
                "grace over: judging the partition",
                extra={"kafka_partition": partition, "floor_ms": broker_ms},
            )
        outcome.extend(self.tracker.advance(partition, broker_ms))
        return outcome

    async def _apply(self, outcome: Outcome) -> None:
        if outcome.expiries:  # 5.
            now = self.clock()
            deliveries = [
                await self.send_expired(expiry, self._expired_record(expiry, now))
                for expiry in outcome.expiries
            ]
            await asyncio.gather(*deliveries)
            for expiry in outcome.expiries:
                metrics.EXPIRIES.inc()
                lag_ms = now - (expiry.last_seen_ms + expiry.tolerance_ms)
                metrics.DETECTION_LAG.observe(max(lag_ms, 0) / 1000)
                log.info(
                    "heartbeat expired",
                    extra={
                        "table_id": expiry.table_id,
                        "instant": expiry.instant,
                        "owner": expiry.owner,
                        "last_seen_ms": expiry.last_seen_ms,
                        "detection_lag_ms": lag_ms,
                    },
                )
        for change in outcome.changes:  # 6.
            key = record_key(*change.key)
            if change.record is not None:
                self.table[key] = change.record.encode()
            elif key in self.table:
                del self.table[key]
                metrics.FORGOTTEN.inc()

    def _expired_record(self, expiry: Expiry, now_ms: int) -> dict[str, Any]:
        record = make_event(
            "HeartbeatExpired",
            table_id=expiry.table_id,
            producer_id=self.producer_id,
            instant=expiry.instant,
            owner=expiry.owner,
            last_seen_ms=expiry.last_seen_ms,
            detected_ms=now_ms,
            tolerance_ms=expiry.tolerance_ms,
            frontier_ms=expiry.frontier_ms,
        )
        record["envelope"]["event_id"] = expiry_event_id(expiry.table_id, expiry.instant)
        return record

    def _records(self) -> Iterator[tuple[Key, LivenessRecord]]:
        for key, value in list(self.table.items()):
            try:
                yield parse_key(key), LivenessRecord.decode(value)
            except (ValueError, KeyError, TypeError) as err:
                log.warning("skipped a liveness table entry: %s", err)

    def _parse(self, message: Message, value: Any, broker_ms: int) -> Beat | None:
        """The beat in ``value``; None for a tick.

        Raises:
            InvalidHeartbeat: not a usable Heartbeat (the reason is for the dead letter).
        """
        if isinstance(value, Undecodable):
            raise InvalidHeartbeat(value.error.reason, str(value.error))
        name, record = value
        if name != "Heartbeat":
            raise InvalidHeartbeat("unexpected_event", f"{name} on the heartbeats topic")
        if record["kind"] == "tick":
            return None
        table_id = record["envelope"]["table_id"]
        if message.key is not None and message.key != table_id.encode():
            raise InvalidHeartbeat("key_mismatch", f"key {message.key!r} != table {table_id!r}")
        if not table_id or not _INSTANT.fullmatch(record["instant"]):
            raise InvalidHeartbeat(
                "invalid_event", f"table {table_id!r}, instant {record['instant']!r}"
            )
        if record["interval_ms"] <= 0 or record["tolerable_misses"] < 1:
            raise InvalidHeartbeat(
                "invalid_event",
                f"interval_ms {record['interval_ms']}, tolerable_misses "
                f"{record['tolerable_misses']}",
            )
        return Beat(
            table_id=table_id,
            instant=record["instant"],
            owner=record["owner"],
            partition=message.partition,
            broker_ms=broker_ms,
            tolerance_ms=record["interval_ms"] * record["tolerable_misses"],
            final=record["kind"] == "final",
        )

    def _broker_ms(self, message: Message) -> int:
        if message.timestamp_type == LOG_APPEND_TIME:
            return round(message.timestamp * 1000)
        # Stamped by its producer: not a clock to judge others by. The monitor's own clock
        # is the next best (the topic should be fixed: see the create_time metric).
        metrics.CREATE_TIME.inc()
        return self.clock()


def _epoch_ms(value: Any) -> int:
    """``timestamp-millis`` as decoded (an aware datetime) or as written (epoch ms)."""
    if isinstance(value, int):
        return value
    return int(round(value.timestamp() * 1000))
