"""What heartbeat-monitor does with each consumed message, apart from Kafka (tests drive it).

``Monitor.on_heartbeat`` takes one message of ``heartbeats``:

1. its broker timestamp advances its partition's clock, whatever the message is;
2. undecodable, not a Heartbeat, or an invalid one: dead-letter it and go on;
3. a tick: the monitor's own first tick after an assignment ends the partition's grace (the
   instants recovered from the liveness changelog are judged from then on);
4. a beat or a final beat: the tracker records it.

``Monitor.on_timeline`` takes one ``TimelineTransition``: a terminal one (completed, aborted,
rolled_back) makes the tracker forget the instant; its record is deleted with the next message
of the instant's partition (at most a tick later).

Both add what must happen to ``Effects``; the worker carries them out per batch, in this order:
publish the expiries and wait until the broker has them all, then write the changed records to
the liveness changelog (and the dead letters). Expiries first: a crash in between re-declares
the death after the restart (the record still says alive), and the event id is derived from
(table, instant), so the duplicate is recognisably the same death; the other order could lose
the expiry for good.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

from lakewarden.clients.liveness import LivenessRecord, parse_key, record_key
from lakewarden.events import EventCodec, EventDecodeError, default_codec, make_event
from lakewarden.events.dlq import Rejection, dead_letter_record
from lakewarden_services.heartbeat_monitor import metrics
from lakewarden_services.heartbeat_monitor.tracker import Beat, Expiry, Key, Outcome, Tracker

log = logging.getLogger(__name__)

TERMINAL: Final = frozenset({"completed", "aborted", "rolled_back"})
_INSTANT = re.compile(r"\d{17}")
# Deaths are one per (table, instant): the id of its HeartbeatExpired is derived from those.
_EXPIRY_NAMESPACE: Final = uuid.UUID("6f1c2a4e-53c9-4f0e-9d55-1b7f0b6c9a10")


@dataclass(frozen=True, slots=True)
class Consumed:
    """A consumed message. ``log_append_time``: the broker stamped ``timestamp_ms``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    log_append_time: bool = True


@dataclass(frozen=True, slots=True)
class ChangelogWrite:
    """Set (value) or delete (None) one record of the liveness changelog, in ``partition``."""

    partition: int
    key: bytes
    value: bytes | None


@dataclass(slots=True)
class Effects:
    """What the worker must do after a batch, in field order."""

    expired: list[tuple[Expiry, dict[str, Any]]] = field(default_factory=list)
    changelog: list[ChangelogWrite] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.expired or self.changelog or self.dead_letters)


class InvalidHeartbeat(ValueError):
    """A message on ``heartbeats`` the monitor cannot use; ``reason`` goes into the dead letter."""

    def __init__(self, reason: str, detail: str, error: EventDecodeError | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.error = error


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def expiry_event_id(table_id: str, instant: str) -> str:
    """The event id of the one ``HeartbeatExpired`` of an instant."""
    return str(uuid.uuid5(_EXPIRY_NAMESPACE, f"{table_id}\n{instant}"))


class Monitor:
    """Feeds the tracker from consumed messages; ``table`` is this instance's copy of the
    liveness changelog (the records of its partitions), kept in step with what it writes."""

    def __init__(
        self,
        *,
        tracker: Tracker,
        table: MutableMapping[bytes, bytes],
        producer_id: str,
        consumer_group: str,
        clock: Callable[[], int] = wall_clock_ms,
        codec: EventCodec | None = None,
    ) -> None:
        self.tracker = tracker
        self.table = table
        self.producer_id = producer_id
        self.consumer_group = consumer_group
        self.clock = clock
        self.codec = codec or default_codec()
        self.effects = Effects()
        self.last_broker_ms: int | None = None
        self.ticks_sent = 0
        # Counted here, handed to Prometheus on ticks: its labelled counters take a lock per
        # call, a cost that matters at 10,000 beats a second.
        self._counted: Counter[str] = Counter()
        self._zombies_counted = 0

    def take_effects(self) -> Effects:
        """What the messages processed since the last call require (see the module doc)."""
        effects, self.effects = self.effects, Effects()
        return effects

    def on_heartbeat(self, message: Consumed) -> None:
        """Process one message of ``heartbeats`` (see the module docstring)."""
        partition, broker_ms = message.partition, self._broker_ms(message)  # 1.
        self.last_broker_ms = broker_ms
        try:
            record = self._decode(message)
            beat = self._parse(message, record, broker_ms)
        except InvalidHeartbeat as err:  # 2.
            self._record(self.tracker.advance(partition, broker_ms))
            self._dead_letter(message, err)
            return
        if beat is None:  # 3. a tick
            self._counted["tick"] += 1
            self._record(self._tick(message, record, broker_ms))
            self._publish_counts()
        else:  # 4.
            self._counted["final" if beat.final else "beat"] += 1
            self._record(self.tracker.beat(beat))

    def on_timeline(self, message: Consumed) -> None:
        """Process one message of ``timeline``: forget instants that reached a terminal state.
        Bad messages are dead-lettered."""
        try:
            name, record = self.codec.decode(message.value)
        except EventDecodeError as err:
            self._dead_letter(message, InvalidHeartbeat(err.reason, str(err), err))
            return
        if name != "TimelineTransition":
            reason = InvalidHeartbeat("unexpected_event", f"{name} on the timeline topic")
            self._dead_letter(message, reason)
            return
        if record["transition"] in TERMINAL:
            metrics.TERMINAL.inc()
            self.tracker.finish(record["envelope"]["table_id"], record["instant"])

    def tick_record(self) -> dict[str, Any]:
        """The next tick this instance sends to a partition."""
        self.ticks_sent += 1
        return make_event(
            "Heartbeat",
            table_id="",
            producer_id=self.producer_id,
            codec=self.codec,
            instant="",
            owner=self.tracker.instance_id,
            interval_ms=0,
            seq=self.ticks_sent,
            kind="tick",
            tolerable_misses=1,
        )

    def assigned(self, partitions: list[int], records: dict[bytes, bytes]) -> None:
        """Partitions of ``heartbeats`` newly assigned, with their changelog ``records``:
        each in grace until its floor. A record of the JSON format before the schema is
        rewritten in Avro (a changelog write), so readers, which refuse JSON, see it."""
        for key, value in records.items():
            if value[:1] != b"{":
                continue
            try:
                legacy = LivenessRecord.decode_legacy(value)
                ident = parse_key(key)
            except (ValueError, KeyError, TypeError) as err:
                log.warning("dropped an unreadable legacy liveness record: %s", err)
                continue
            records[key] = self._encode(ident, legacy)
            self.effects.changelog.append(ChangelogWrite(legacy.partition, key, records[key]))
            metrics.MIGRATED.inc()
        self.table.update(records)
        self.tracker.assign(partitions, wall_ms=self.clock())

    def revoked(self, partitions: list[int]) -> None:
        """Partitions another instance owns now: forget them and their records."""
        gone = set(partitions)
        for key, record in list(self._records()):
            if record.partition in gone:
                self.table.pop(record_key(*key), None)
        self.tracker.revoke(partitions)

    # -- internals -----------------------------------------------------------------------

    def _tick(self, message: Consumed, record: dict[str, Any], broker_ms: int) -> Outcome:
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

    def _record(self, outcome: Outcome) -> None:
        if not (outcome.changes or outcome.expiries):
            return
        now = self.clock()
        for expiry in outcome.expiries:
            self.effects.expired.append((expiry, self._expired_record(expiry, now)))
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
        for change in outcome.changes:
            key = record_key(*change.key)
            if change.record is not None:
                value = self._encode(change.key, change.record)
                self.table[key] = value
                self.effects.changelog.append(ChangelogWrite(change.record.partition, key, value))
            else:
                old = self.table.pop(key, None)
                if old is not None:
                    metrics.FORGOTTEN.inc()
                    partition = self._decode_record(old).partition
                    self.effects.changelog.append(ChangelogWrite(partition, key, None))

    def _expired_record(self, expiry: Expiry, now_ms: int) -> dict[str, Any]:
        record = make_event(
            "HeartbeatExpired",
            table_id=expiry.table_id,
            producer_id=self.producer_id,
            codec=self.codec,
            instant=expiry.instant,
            owner=expiry.owner,
            last_seen_ms=expiry.last_seen_ms,
            detected_ms=now_ms,
            tolerance_ms=expiry.tolerance_ms,
            frontier_ms=expiry.frontier_ms,
        )
        record["envelope"]["event_id"] = expiry_event_id(expiry.table_id, expiry.instant)
        return record

    def _dead_letter(self, message: Consumed, err: InvalidHeartbeat) -> None:
        why = err.error if err.error is not None else Rejection(err.reason, str(err))
        record = dead_letter_record(
            why,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            producer_id=self.producer_id,
            consumer_group=self.consumer_group,
            codec=self.codec,
        )
        self.effects.dead_letters.append(record)
        log.warning(
            "dead-lettering an event: %s",
            err,
            extra={
                "reason": err.reason,
                "kafka_topic": message.topic,
                "kafka_partition": message.partition,
                "kafka_offset": message.offset,
            },
        )

    def _publish_counts(self) -> None:
        counted, self._counted = self._counted, Counter()
        for kind, count in counted.items():
            metrics.BEATS.labels(kind).inc(count)
        zombies = self.tracker.zombie_beats
        if zombies > self._zombies_counted:
            metrics.ZOMBIE_BEATS.inc(zombies - self._zombies_counted)
            self._zombies_counted = zombies

    def _records(self) -> Iterator[tuple[Key, LivenessRecord]]:
        for key, value in list(self.table.items()):
            try:
                yield parse_key(key), self._decode_record(value)
            except (ValueError, KeyError, TypeError) as err:
                log.warning("skipped a liveness table entry: %s", err)

    def _encode(self, key: Key, record: LivenessRecord) -> bytes:
        return record.encode(*key, producer_id=self.producer_id, codec=self.codec)

    def _decode_record(self, value: bytes) -> LivenessRecord:
        """Raises: LivenessDecodeError (a ValueError)."""
        return LivenessRecord.decode(value, codec=self.codec)

    def _decode(self, message: Consumed) -> dict[str, Any]:
        """Raises: InvalidHeartbeat (undecodable, or not a Heartbeat)."""
        try:
            name, record = self.codec.decode(message.value)
        except EventDecodeError as err:
            raise InvalidHeartbeat(err.reason, str(err), err) from err
        if name != "Heartbeat":
            raise InvalidHeartbeat("unexpected_event", f"{name} on the heartbeats topic")
        return record

    def _parse(self, message: Consumed, record: dict[str, Any], broker_ms: int) -> Beat | None:
        """The beat in ``record``; None for a tick.

        Raises:
            InvalidHeartbeat: not a usable Heartbeat (the reason is for the dead letter).
        """
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

    def _broker_ms(self, message: Consumed) -> int:
        if message.log_append_time:
            return message.timestamp_ms
        # Stamped by its producer: not a clock to judge others by. The monitor's own clock
        # is the next best (the topic should be fixed: see the create_time metric).
        metrics.CREATE_TIME.inc()
        return self.clock()


def _epoch_ms(value: Any) -> int:
    """``timestamp-millis`` as decoded (an aware datetime) or as written (epoch ms)."""
    if isinstance(value, int):
        return value
    return int(round(value.timestamp() * 1000))
