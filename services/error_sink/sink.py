"""error-sink's Kafka loop: ``ErrorRecord`` events in, error-table instants out.

Why a confluent-kafka loop and not a faust agent: the sink holds records for minutes (until
their main instant ends) and must not let the group's offset pass a record before its error
table commit; faust commits offsets of processed events on its own. Here offsets are
committed by hand, only below the lowest record still buffered
(``ErrorBuffer.committable_offsets``), so a crash or ``kill -9`` at any point redelivers every
record whose instant was not settled, and the sources the error table's completed instants
name (``CommitStats.error_sources``) make the redelivered records of settled instants no-ops.

The loop, each turn:
1. consume a batch; decode each message; undecodable, foreign or context-less events go to the
   dead-letter topic; the others are buffered per (table id, instant);
2. every ``check_interval_s``: for each pending (table, instant) that an event says ended
   (a ``TimelineTransition`` ending it or a ``JobCommitResult``: ``hints``), that is new, or
   that was not read for ``fallback_check_s``, read the main table's timeline from storage
   (the truth) and, once it completed, its job's ``_SUCCESS``; take the partition's high
   watermark for each decided one (``lakewarden.errortable.acceptance``);
   a key whose instant stays unresolved (no such table, never on the timeline) past the
   bounds of ``lakewarden_services.error_sink.poison`` is dead-lettered with its original bytes;
3. commit the ready ones: per error table, one instant with the accepted records of every
   ready main instant (``commit_errors``: idempotent by source key);
4. commit the offsets below everything still buffered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import Message, TopicPartition

from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.commit import ManifestCommitter, SuccessData
from lakewarden.errortable import (
    ErrorBuffer,
    ErrorTableLocation,
    Pending,
    SourceErrors,
    SourceKey,
    commit_errors,
    committed_sources,
    error_table_location,
    open_error_table,
    outcome_of,
    parse_error_record,
)
from lakewarden.errortable.acceptance import Discarded, Outcome, ReadyErrors
from lakewarden.errortable.records import (
    ERROR_TABLE_NAME,
    ERROR_TABLE_URI,
    TABLE_NAME,
    TABLE_URI,
    InvalidErrorRecord,
)
from lakewarden.errortable.table import SourcesAlreadyCommittedError
from lakewarden.events import EventCodec, EventConsumer, Rejection, default_codec
from lakewarden.events.consumer import HeldMessage
from lakewarden.handle import TableHandle
from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.table import Coordinator, Timeline
from lakewarden_services._common.dlq import DEAD_LETTERS
from lakewarden_services.error_sink import metrics
from lakewarden_services.error_sink.hints import TimelineHints
from lakewarden_services.error_sink.poison import (
    GIVE_UP_REASON,
    GiveUp,
    Unresolved,
    UnresolvedSources,
)

log = logging.getLogger(__name__)

SERVICE: Final = "error-sink"
_BATCH: Final = 1_000
_MAX_WAIT_S: Final = 0.2
_REMEMBER_GIVEN_UP: Final = 10_000


@dataclass
class SinkOptions:
    errors_topic: str
    dlq_topic: str
    group_id: str
    group_instance_id: str | None = None
    check_interval_s: float = 1.0
    # A key whose instant cannot be found is dead-lettered after both (``poison``).
    give_up_after_s: float = 900.0
    give_up_after_checks: int = 30
    # A pending key no event named is read from storage this often (events can be missed).
    fallback_check_s: float = 10.0
    # Read timeline / job.results for ended instants (off: poll storage every check).
    hints: bool = True
    # Tests: called with the error-table instant after its files are written.
    before_complete: Callable[[str], None] | None = None


class ErrorSink:
    """Runs until ``stop`` is set (see the module doc)."""

    def __init__(
        self,
        settings: Settings,
        options: SinkOptions,
        *,
        coordinator: Coordinator,
        codec: EventCodec | None = None,
        on_ready: Callable[[], None] = lambda: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.options = options
        self.coordinator = coordinator
        self.codec = codec or default_codec()
        self.on_ready = on_ready
        self.buffer = ErrorBuffer()
        self.ready = False
        self.committed_instants = 0
        self.unresolved = UnresolvedSources(
            after_s=options.give_up_after_s, after_checks=options.give_up_after_checks, clock=clock
        )
        # The original messages of buffered records, per key and uid: a key given up on is
        # dead-lettered byte for byte (pruned to the buffer's keys after each check).
        self._held: dict[SourceKey, dict[str, HeldMessage]] = {}
        # Keys given up on, with why: their later records go to the DLQ too, never dropped.
        self._given_up: OrderedDict[SourceKey, str] = OrderedDict()
        self._assigned: set[int] = set()
        self._timelines: dict[str, Timeline] = {}
        self._error_tables: dict[str, TableHandle] = {}
        self.clock = clock
        self.hints = TimelineHints(settings) if options.hints else None
        # Pending keys: when storage last said "still pending" (hints or the fallback say
        # when to read again).
        self._pending_read: dict[SourceKey, float] = {}
        self.storage_reads = 0
        config: dict[str, Any] = {
            "auto_offset_reset": "earliest",
            "session_timeout_ms": 6_000,
            "heartbeat_interval_ms": 1_000,
            "logger": log,
        }
        if options.group_instance_id:
            config["group_instance_id"] = options.group_instance_id
        # Offsets by hand, below what is buffered (step 4); bad events dead-lettered (step 1).
        self.consumer = EventConsumer(
            settings,
            group_id=options.group_id,
            consumer_id=SERVICE,
            codec=self.codec,
            auto_commit=False,
            dlq_topic=options.dlq_topic,
            on_dead_letter=lambda rejection: DEAD_LETTERS.labels(SERVICE, rejection.reason).inc(),
            **config,
        )
        metrics.BUFFERED.set_function(lambda: len(self.buffer))

    def run(self, stop: threading.Event) -> None:
        """The loop until ``stop`` is set; then commit offsets and leave the group."""
        self.consumer.subscribe(
            [self.options.errors_topic], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        last_check = time.monotonic()
        try:
            while not stop.is_set():
                batch = self.consumer.consume(_BATCH, _MAX_WAIT_S)
                for msg in batch:
                    self._handle(msg)  # 1.
                if time.monotonic() - last_check >= self.options.check_interval_s:
                    self.check()  # 2. 3.
                    self._commit_offsets()  # 4.
                    last_check = time.monotonic()
        finally:
            try:
                self._commit_offsets()
            finally:
                self.consumer.close()  # and its DLQ producer, flushed
                if self.hints is not None:
                    self.hints.close()

    # -- 1. consume ----------------------------------------------------------------------------

    def _handle(self, msg: Message) -> None:
        partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
        event = self.consumer.decode(msg)  # undecodable: dead-lettered (durable) already
        if event is None:
            self.buffer.consumed(partition, offset)
            return
        try:
            if event.name != "ErrorRecord":
                raise InvalidErrorRecord(f"a {event.name} event on the errors topic")
            row = parse_error_record(event.record)
        except InvalidErrorRecord as err:
            self.consumer.dead_letter(msg, Rejection("invalid_request", str(err)))
            self.buffer.consumed(partition, offset)
            return
        key = SourceKey(row.table_id, row.instant)
        if key in self._given_up:
            why = Rejection(GIVE_UP_REASON, self._given_up[key], "UnresolvedSource")
            self.consumer.dead_letter(msg, why)
            self.buffer.consumed(partition, offset)
            return
        if not self.buffer.add(row, partition, offset):
            metrics.DROPPED.labels("late").inc()
            return
        held = self._held.setdefault(key, {})
        held.setdefault(row.uid, HeldMessage.of(msg))

    # -- 2. decide, 3. commit -------------------------------------------------------------------

    def check(self, ended: set[SourceKey] | None = None) -> None:
        """Decide the pending instants from storage, then commit the ready ones. ``ended``:
        keys an event said ended (default: drained from ``hints``)."""
        if ended is None:
            ended = self.hints.drain() if self.hints is not None else set()
        now = self.clock.monotonic()
        for key in self.buffer.keys():
            last = self._pending_read.get(key)
            if (
                last is not None
                and key not in ended
                and now - last < self.options.fallback_check_s
                and self.hints is not None
                and not self.hints.failed
            ):
                continue  # storage said pending, and nothing says it ended since
            self.storage_reads += 1
            metrics.STORAGE_READS.inc()
            outcome = self._outcome(key)
            if isinstance(outcome, Pending):
                self._pending_read[key] = now
            else:
                self._pending_read.pop(key, None)
            if isinstance(outcome, Unresolved):
                verdict = self.unresolved.note(key, outcome.reason)
                if verdict is not None:
                    self._give_up(verdict)
                continue
            self.unresolved.resolved(key)
            if isinstance(outcome, Pending):
                continue
            watermarks = self._watermarks(self.buffer.partitions(key))
            if watermarks is None:
                continue
            dropped = self.buffer.decide(key, outcome, watermarks)
            if isinstance(outcome, Discarded):
                metrics.DROPPED.labels("discarded").inc(dropped)
                metrics.SOURCES.labels("discarded").inc()
                log.info("dropped %d failed records: %s", dropped, outcome.reason)
        ready = self.buffer.ready()
        by_table: dict[ErrorTableLocation, list[ReadyErrors]] = defaultdict(list)
        for item in ready:
            metrics.DROPPED.labels("not_accepted").inc(item.dropped)
            if not item.rows:
                metrics.SOURCES.labels("nothing_accepted").inc()
                self.buffer.finish([item.key])
                continue
            by_table[self._location(item)].append(item)
        for location, items in by_table.items():
            self._commit(location, items)
        live = self.buffer.keys(pending_only=False)
        self.unresolved.keep(live)
        for gone in self._pending_read.keys() - set(live):
            del self._pending_read[gone]
        for gone in self._held.keys() - set(live):
            del self._held[gone]
        metrics.CHECKS.inc()

    def _outcome(self, key: SourceKey) -> Outcome | Unresolved:
        """How ``key``'s instant ended, or ``Unresolved`` when it is not on its table's
        timeline or the timeline could not be read."""
        sample = self.buffer.sample(key)
        uri = sample.context[TABLE_URI]
        try:
            timeline = self._timelines.get(uri)
            if timeline is None:
                storage = open_storage(uri, self.settings)
                timeline = Timeline(storage, table=sample.context[TABLE_NAME])
                self._timelines[uri] = timeline
            state = timeline.load().get(key.instant)

            def summary_of(job_id: str) -> SuccessData | None:
                return ManifestCommitter(timeline.storage, job_id).summary()

            if state is None:
                name = sample.context[TABLE_NAME]
                return Unresolved(f"not on the timeline of table {name} at {uri}")
            return outcome_of(state, summary_of)
        except Exception as err:  # noqa: BLE001 - storage trouble: try again next check
            metrics.CHECK_ERRORS.labels("outcome").inc()
            log.warning("cannot read the outcome of %s at %s: %r", key, uri, err)
            return Unresolved(f"cannot read the timeline at {uri}: {err!r}")

    def _give_up(self, verdict: GiveUp) -> None:
        """Dead-letter every held record of the key, then forget it (its offsets move). If a
        dead letter cannot be delivered the key stays buffered: tried again next check (a
        record may then be in the DLQ twice, never zero times)."""
        held = self._held.get(verdict.key, {})
        why = Rejection(GIVE_UP_REASON, verdict.detail, "UnresolvedSource")
        try:
            for message in held.values():
                self.consumer.dead_letter_held(message, why)
        except Exception as err:  # noqa: BLE001 - the DLQ is away: keep the records
            metrics.CHECK_ERRORS.labels("dead_letter").inc()
            log.warning("cannot dead-letter the records of %s: %r", verdict.key, err)
            return
        dropped = self.buffer.decide(verdict.key, Discarded(verdict.detail), {})
        self._held.pop(verdict.key, None)
        self.unresolved.resolved(verdict.key)
        self._given_up[verdict.key] = verdict.detail
        while len(self._given_up) > _REMEMBER_GIVEN_UP:
            self._given_up.popitem(last=False)
        metrics.DROPPED.labels("dead_lettered").inc(dropped)
        metrics.SOURCES.labels("given_up").inc()
        log.warning(
            "gave up on %d failed records: %s",
            dropped,
            verdict.detail,
            extra={"source": str(verdict.key), "dead_lettered": len(held)},
        )

    def _watermarks(self, partitions: list[int]) -> dict[int, int] | None:
        marks: dict[int, int] = {}
        for partition in partitions:
            try:
                _, high = self.consumer.watermarks(
                    self.options.errors_topic, partition, timeout_s=5
                )
            except Exception as err:  # noqa: BLE001 - the broker is away: next check
                metrics.CHECK_ERRORS.labels("watermarks").inc()
                log.warning("cannot read the high watermark of partition %d: %r", partition, err)
                return None
            marks[partition] = high
        return marks

    def _location(self, item: ReadyErrors) -> ErrorTableLocation:
        """The error table the writer chose (in the context), else the sink's settings'."""
        context = item.sample.context
        uri, name = context.get(ERROR_TABLE_URI), context.get(ERROR_TABLE_NAME)
        if uri and name:
            return ErrorTableLocation(uri, name)
        return error_table_location(
            context[TABLE_URI], context[TABLE_NAME], self.settings.error_table
        )

    def _error_table(self, location: ErrorTableLocation) -> TableHandle:
        table = self._error_tables.get(location.uri)
        if table is None:
            table = open_error_table(location, settings=self.settings, coordinator=self.coordinator)
            self._error_tables[location.uri] = table
        return table

    def _commit(self, location: ErrorTableLocation, items: list[ReadyErrors]) -> None:
        batches = [SourceErrors(item.key, item.rows) for item in items]
        fresh: set[str] = set()
        for _ in range(3):  # another instance may have committed some sources meanwhile
            try:
                table = self._error_table(location)
                fresh = {str(b.key) for b in batches} - committed_sources(table.state())
                instant = commit_errors(
                    table, batches, before_complete=self.options.before_complete
                )
            except SourcesAlreadyCommittedError:
                continue
            except Exception as err:  # noqa: BLE001 - keep the records; retry next check
                metrics.CHECK_ERRORS.labels("commit").inc()
                log.warning("cannot commit to error table %s: %r", location.uri, err)
                return
            break
        else:
            return
        if instant is not None:
            metrics.COMMITS.labels(location.name).inc()
            self.committed_instants += 1
            log.info(
                "committed error-table instant",
                extra={"error_table": location.uri, "instant": instant, "sources": len(items)},
            )
        for item in items:
            committed_now = instant is not None and str(item.key) in fresh
            if committed_now:
                metrics.FAILED_RECORDS.labels(item.sample.context[TABLE_NAME]).inc(len(item.rows))
                metrics.SOURCES.labels("committed").inc()
            else:
                metrics.DROPPED.labels("duplicate").inc(len(item.rows))
                metrics.SOURCES.labels("already_committed").inc()
        self.buffer.finish(item.key for item in items)

    # -- 4. offsets and the group ---------------------------------------------------------------

    def _commit_offsets(self, only: set[int] | None = None) -> None:
        partitions = self._assigned if only is None else only
        offsets = [
            TopicPartition(self.options.errors_topic, p, o)
            for p, o in self.buffer.committable_offsets().items()
            if p in partitions
        ]
        if offsets:
            try:
                self.consumer.commit(offsets)
            except Exception as err:  # noqa: BLE001 - committed next time; redelivery is safe
                log.warning("offset commit failed: %r", err)

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self._assigned |= {tp.partition for tp in partitions}
        if not self.ready:
            self.ready = True
            self.on_ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self._commit_offsets(gone & self._assigned)
        self.buffer.revoke(gone)
        self._assigned -= gone
