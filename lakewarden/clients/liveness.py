"""The liveness view: heartbeat-monitor's verdicts, read from the changelog it keeps.

    with Liveness(settings) as view:
        if view.status("orders", "20250314092653589") is Verdict.DEAD:
            ...  # roll the instant back

heartbeat-monitor keeps one record per tracked instant in a compacted changelog topic,
``<prefix>heartbeat-monitor-liveness-changelog``, so the latest record of every instant is in
Kafka, readable by anyone. The view reads that topic from the beginning into a
dict and, before answering, catches up to the high watermarks it asked the broker for: an answer
reflects every verdict the monitor had written when ``status`` was called. That costs one
offsets request per partition (a few ms), which is what makes the view usable inside another
service's table transaction. ``fresh=False`` answers from what was read so far, without IO.

The record format (this module is its one definition; the monitor writes with it):

- key: UTF-8 JSON ``["<table id>", "<instant>"]`` (an identifier, as every topic's key is;
  compaction keeps the latest value per key);
- value: the ``LivenessRecord`` event (``schemas/LivenessRecord.avsc``, Avro single-object
  encoded like every event): the envelope (its ``table_id`` is the key's), ``instant``,
  ``status`` (``alive`` | ``dead`` | ``ended``), ``owner``, ``partition``, ``last_seen_ms``,
  ``tolerance_ms``, ``since_ms``; a tombstone (null value) when the monitor forgets the
  instant (it reached a terminal state, or was dead or ended for ``forget_after_s``).

A value the view cannot decode (another schema, a status it does not know, a key that does not
match) is refused: dead-lettered with the reason and not applied, so that instant reads
UNKNOWN rather than a guess. Values of the JSON format written before the Avro schema
(``{"status": ...}``) are refused too, counted in ``legacy`` and not dead-lettered: after an
upgrade heartbeat-monitor rewrites every record it recovers in Avro (``decode_legacy`` is for
it alone), behind the JSON one in the same partition, so a view that caught up has the Avro
record. A reader still on the JSON format skips the Avro records (keeping the verdict it had);
either way UNKNOWN or a stale ALIVE only delays a rollback, never licenses one.

``alive`` means the monitor has not declared the executor dead (it may be in the tolerance
window after its last beat, or in the grace window after a monitor restart); ``dead`` means a
``HeartbeatExpired`` was published; ``ended`` means the executor said it stopped beating on
purpose. The view answers ALIVE, DEAD for both ``dead`` and ``ended`` (nobody is executing the
instant: the same answer ``EmbeddedCoordinator`` gives after a heartbeat block ends), and
UNKNOWN when there is no record.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Final, Literal

from lakewarden.errors import RetryableError
from lakewarden.events.codec import EventCodec, EventDecodeError, default_codec
from lakewarden.events.consumer import EventConsumer, EventConsumerError
from lakewarden.events.dlq import Rejection
from lakewarden.events.envelope import make_event
from lakewarden.events.topics import LIVENESS_CHANGELOG as LIVENESS_CHANGELOG
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Liveness as Verdict

try:
    from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

SERVICE: Final = "heartbeat-monitor"
TABLE_NAME: Final = "liveness"
EVENT: Final = "LivenessRecord"
RecordStatus = Literal["alive", "dead", "ended"]
_VERDICTS: Final[dict[str, Verdict]] = {
    "alive": Verdict.ALIVE,
    "dead": Verdict.DEAD,
    "ended": Verdict.DEAD,
}


class LivenessUnavailableError(RetryableError):
    """The view could not catch up with the monitor's changelog (broker unreachable)."""


class LivenessDecodeError(ValueError):
    """A changelog value is not a ``LivenessRecord`` this reader can use; ``reason`` is the
    dead letter's reason (``legacy_json`` for the JSON format before the schema)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class LivenessRecord:
    """What the monitor knows about one instant. Times are broker time (epoch ms)."""

    status: RecordStatus
    owner: str
    partition: int
    last_seen_ms: int
    tolerance_ms: int
    since_ms: int

    @property
    def verdict(self) -> Verdict:
        return _VERDICTS[self.status]

    def encode(
        self,
        table_id: str,
        instant: str,
        *,
        producer_id: str = SERVICE,
        codec: EventCodec | None = None,
    ) -> bytes:
        """The ``LivenessRecord`` event of this record for ``(table_id, instant)``."""
        codec = codec or default_codec()
        event = make_event(
            EVENT,
            table_id=table_id,
            producer_id=producer_id,
            codec=codec,
            instant=instant,
            **asdict(self),
        )
        return codec.encode(EVENT, event)

    @classmethod
    def decode(
        cls, data: bytes, *, key: tuple[str, str] | None = None, codec: EventCodec | None = None
    ) -> LivenessRecord:
        """The record in a changelog value; with ``key``, it must be that instant's.

        Raises: LivenessDecodeError (``legacy_json``, ``key_mismatch``,
        ``unexpected_event``, or the codec's reason: ``bad_magic``, ``unknown_fingerprint``,
        ``corrupt_body``, ...)."""
        if data[:1] == b"{":
            raise LivenessDecodeError("legacy_json", "a JSON liveness record (before the schema)")
        try:
            name, event = (codec or default_codec()).decode(data)
        except EventDecodeError as err:
            raise LivenessDecodeError(err.reason, str(err)) from err
        if name != EVENT:
            raise LivenessDecodeError("unexpected_event", f"a {name} event, not {EVENT}")
        ident = (str(event["envelope"]["table_id"]), str(event["instant"]))
        if key is not None and ident != key:
            raise LivenessDecodeError("key_mismatch", f"record of {ident} under key {key}")
        return cls(
            status=event["status"],
            owner=event["owner"],
            partition=event["partition"],
            last_seen_ms=event["last_seen_ms"],
            tolerance_ms=event["tolerance_ms"],
            since_ms=event["since_ms"],
        )

    @classmethod
    def decode_legacy(cls, data: bytes) -> LivenessRecord:
        """A record of the JSON format written before the schema, for heartbeat-monitor's
        migration alone (readers refuse it).

        Raises: ValueError, KeyError or TypeError when ``data`` is not such a record."""
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("status") not in _VERDICTS:
            raise ValueError(f"not a liveness record: {data[:200]!r}")
        return cls(
            status=raw["status"],
            owner=str(raw["owner"]),
            partition=int(raw["partition"]),
            last_seen_ms=int(raw["last_seen_ms"]),
            tolerance_ms=int(raw["tolerance_ms"]),
            since_ms=int(raw["since_ms"]),
        )


def record_key(table_id: str, instant: str) -> bytes:
    """The changelog key of an instant."""
    return json.dumps([table_id, instant], separators=(",", ":")).encode()


def parse_key(key: bytes) -> tuple[str, str]:
    """``(table id, instant)`` of a changelog key.

    Raises: ValueError (or a subclass) when ``key`` is not a record key.
    """
    raw = json.loads(key)
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(p, str) for p in raw)):
        raise ValueError(f"not a liveness key: {key[:200]!r}")
    return raw[0], raw[1]


def liveness_topic(settings: Settings) -> str:
    """The monitor's changelog topic under the settings' prefix."""
    return LIVENESS_CHANGELOG.name(settings)


class Liveness:
    """A read-only, thread-safe view of heartbeat-monitor's verdicts.

    No network IO in ``__init__``; the consumer is created on the first ``status``. One view
    per process is enough: it holds one record per instant the monitor tracks.
    """

    def __init__(self, settings: Settings, *, topic: str | None = None) -> None:
        self.settings = settings
        self.topic = topic or liveness_topic(settings)
        self._lock = threading.Lock()
        self._consumer: EventConsumer | None = None
        self._offsets: EventConsumer | None = None
        self._partitions: list[int] = []
        self._records: dict[tuple[str, str], LivenessRecord] = {}
        self.skipped = 0  # changelog messages refused (dead-lettered, or legacy JSON)
        self.legacy = 0  # of which JSON records of the format before the schema

    def status(
        self, table_id: str, instant: str, *, fresh: bool = True, timeout_s: float | None = None
    ) -> Verdict:
        """ALIVE, DEAD (declared dead, or ended on purpose) or UNKNOWN (no record).

        Raises:
            LivenessUnavailableError: ``fresh`` and the view could not catch up within
                ``timeout_s`` (default: the settings' request timeout).
            ConfigurationError: Kafka is not configured.
        """
        record = self.record(table_id, instant, fresh=fresh, timeout_s=timeout_s)
        return Verdict.UNKNOWN if record is None else record.verdict

    def record(
        self, table_id: str, instant: str, *, fresh: bool = True, timeout_s: float | None = None
    ) -> LivenessRecord | None:
        """The monitor's record of the instant, or None.

        Raises:
            as ``status``.
        """
        with self._lock:
            if fresh:
                self._catch_up(timeout_s)
            else:
                self._drain()
            return self._records.get((table_id, instant))

    def snapshot(self, *, fresh: bool = True) -> dict[tuple[str, str], LivenessRecord]:
        """Every record the view holds (after catching up when ``fresh``).

        Raises:
            as ``status``.
        """
        with self._lock:
            if fresh:
                self._catch_up(None)
            else:
                self._drain()
            return dict(self._records)

    def close(self) -> None:
        """Close the consumer (a later call opens a new one and reads the topic again)."""
        with self._lock:
            consumers = (self._consumer, self._offsets)
            self._consumer = self._offsets = None
            self._records.clear()
            self._partitions = []
            for consumer in consumers:
                if consumer is not None:
                    consumer.close()

    def __enter__(self) -> Liveness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _client(self, timeout_s: float) -> EventConsumer:
        if self._consumer is None:
            self._consumer = self._new_consumer()
            # Offsets are asked on a client of their own: on the reading client they would
            # queue behind its fetch long-poll (up to fetch.wait.max.ms, 500 ms) per partition.
            self._offsets = self._new_consumer()
        if not self._partitions:
            self._assign(self._consumer, timeout_s)
        return self._consumer

    def _new_consumer(self) -> EventConsumer:
        # assign() only: the private group id is never joined nor committed to. Messages are
        # read raw and decoded here (``_apply``): a refused one is dead-lettered through it.
        return EventConsumer(
            self.settings,
            group_id=f"{SERVICE}-view-{uuid.uuid4().hex[:8]}",
            auto_commit=False,
            dead_letters=True,
            logger=log,
        )

    def _assign(self, consumer: EventConsumer, timeout_s: float) -> None:
        try:
            partitions = consumer.partitions(self.topic, timeout_s=timeout_s)
        except EventConsumerError as err:
            raise LivenessUnavailableError(f"Cannot read topic {self.topic}: {err}") from err
        if not partitions:
            return  # the monitor has not run yet: nothing is known (UNKNOWN)
        self._partitions = partitions
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])

    def _catch_up(self, timeout_s: float | None) -> None:
        timeout = self.settings.kafka.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        consumer = self._client(timeout)
        targets = {p: self._high_watermark(p, timeout) for p in self._partitions}
        while True:
            behind = self._behind(consumer, targets)
            if not behind:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LivenessUnavailableError(
                    f"the liveness view did not catch up with {self.topic} within {timeout:g} s "
                    f"(partitions behind: {sorted(behind)}). Help: is the broker up?"
                )
            self._consume(consumer, min(remaining, 0.05))

    def _high_watermark(self, partition: int, timeout: float) -> int:
        assert self._offsets is not None, "created with the consumer"
        try:
            return self._offsets.watermarks(self.topic, partition, timeout_s=timeout)[1]
        except EventConsumerError as err:
            raise LivenessUnavailableError(
                f"Cannot read the offsets of {self.topic} [{partition}]: {err}"
            ) from err

    def _behind(self, consumer: EventConsumer, targets: dict[int, int]) -> set[int]:
        behind = set()
        for partition, position in consumer.positions(self.topic, targets).items():
            # A negative position means nothing was consumed yet: behind unless empty.
            if max(position, 0) < targets[partition]:
                behind.add(partition)
        return behind

    def _drain(self) -> None:
        if self._consumer is None:
            self._client(self.settings.kafka.request_timeout_s)
        assert self._consumer is not None
        self._consume(self._consumer, 0.0)

    def _consume(self, consumer: EventConsumer, timeout_s: float) -> None:
        # consume() waits for its whole timeout unless the batch fills: take what is there,
        # and only when nothing is, wait for one message (poll returns as soon as it has one).
        try:
            batch = consumer.consume(10_000, 0)
            if not batch and timeout_s > 0:
                msg = consumer.poll_message(timeout_s)
                batch = [] if msg is None else [msg]
        except EventConsumerError as err:
            raise LivenessUnavailableError(f"liveness view consumer failed: {err}") from err
        for msg in batch:
            self._apply(consumer, msg)

    def _apply(self, consumer: EventConsumer, msg: Message) -> None:
        """Apply one changelog message, or refuse it: a value that does not decode is
        dead-lettered and not applied (the instant keeps its earlier record, or none)."""
        key, value = msg.key(), msg.value()
        try:
            ident = parse_key(key or b"")
        except ValueError as err:
            self._refuse(consumer, msg, LivenessDecodeError("invalid_key", str(err)))
            return
        if value is None:
            self._records.pop(ident, None)
            return
        try:
            self._records[ident] = LivenessRecord.decode(value, key=ident)
        except LivenessDecodeError as err:
            self._refuse(consumer, msg, err)

    def _refuse(self, consumer: EventConsumer, msg: Message, err: LivenessDecodeError) -> None:
        self.skipped += 1
        if err.reason == "legacy_json":
            self.legacy += 1
            if self.legacy == 1:
                log.warning(
                    "refused JSON liveness records of the format before the schema: "
                    "heartbeat-monitor rewrites them in Avro when it recovers them"
                )
            return
        log.warning("refused a liveness changelog message: %s", err)
        try:
            consumer.dead_letter(msg, Rejection(err.reason, str(err), type(err).__name__))
        except Exception as dlq_err:  # noqa: BLE001 - refused either way; the view keeps serving
            log.warning("could not dead-letter the refused liveness message: %s", dlq_err)
