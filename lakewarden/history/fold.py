"""The pure fold: decoded events of one table in, its ``TableHistory`` out.

No Kafka here: ``build_history(table_id, events)`` takes ``Recorded`` events (and
``Unreadable`` messages, which it keeps as reported problems) in any topic interleaving;
events of other tables are skipped. Within one topic partition Kafka keeps order, and every
event the fold pairs across topics (a lock request and its reply, a cancel request and its
result) is paired by id, so the interleaving of topics does not change the result.

A decoded event whose fields do not make sense (a timeline payload that is not JSON, a
missing field) does not stop the fold: it becomes an ``Unreadable`` with reason
``malformed_event``, like a message that did not decode at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lakewarden.history._locks import LockLedger
from lakewarden.history.model import (
    CancelStep,
    Expiry,
    HeartbeatTrail,
    InstantStory,
    JobRequest,
    JobResult,
    Recorded,
    RetentionGap,
    Step,
    TableHistory,
    TaskAttempt,
    Unreadable,
)

# RFC-20's context key naming the instant a failed record belongs to.
ERROR_CONTEXT_INSTANT = "commitTime"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(value: datetime | int) -> int:
    """A ``timestamp-millis`` field as epoch ms: decoded as an aware ``datetime`` by the
    default codec, already epoch ms (an ``int``) by ``epoch_ms_codec``."""
    if type(value) is int:
        return value
    if isinstance(value, datetime):  # exact: float seconds would round some ms down
        return (value - _EPOCH) // timedelta(milliseconds=1)
    return int(value)


@dataclass
class _Trail:
    owner: str
    interval_ms: int
    tolerable_misses: int
    beats: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    longest_gap_ms: int = 0
    seqs: set[int] = field(default_factory=set)
    final_ms: int | None = None
    longest_gap_from_ms: int | None = None

    def freeze(self) -> HeartbeatTrail:
        missing: tuple[int, ...] = ()
        if self.seqs:
            missing = tuple(s for s in range(min(self.seqs), max(self.seqs)) if s not in self.seqs)
        return HeartbeatTrail(
            owner=self.owner,
            interval_ms=self.interval_ms,
            tolerable_misses=self.tolerable_misses,
            beats=self.beats,
            first_ms=self.first_ms,
            last_ms=self.last_ms,
            longest_gap_ms=self.longest_gap_ms,
            missing_seqs=missing,
            final_ms=self.final_ms,
            longest_gap_from_ms=self.longest_gap_from_ms,
        )


@dataclass
class _Instant:
    steps: dict[int, Step] = field(default_factory=dict)
    trails: dict[str, _Trail] = field(default_factory=dict)
    expiries: dict[str, Expiry] = field(default_factory=dict)  # by event id (redeliveries)
    attempts: dict[str, TaskAttempt] = field(default_factory=dict)
    job_requests: list[JobRequest] = field(default_factory=list)
    job_results: list[JobResult] = field(default_factory=list)
    cancels: dict[str, CancelStep] = field(default_factory=dict)
    error_records: int = 0


class HistoryBuilder:
    """Accumulates one table's events; ``feed`` them, then ``build``."""

    def __init__(self, table_id: str) -> None:
        self.table_id = table_id
        self._instants: dict[str, _Instant] = {}
        self._locks = LockLedger()
        self._error_records = 0
        self._dead_letters: list[Unreadable] = []
        self._unreadable: list[Unreadable] = []
        self._gaps: list[RetentionGap] = []
        self._events = 0
        self._handlers: dict[str, Callable[[Recorded, dict[str, Any]], None]] = {
            "LockRequest": self._lock_request,
            "LockReply": self._lock_reply,
            "Heartbeat": self._heartbeat,
            "HeartbeatExpired": self._expired,
            "TaskManifest": self._manifest,
            "JobCommitRequest": self._job_request,
            "JobCommitResult": self._job_result,
            "TimelineTransition": self._transition,
            "CancelRequest": self._cancel_request,
            "CancelResult": self._cancel_result,
            "ErrorRecord": self._error_record,
            "DeadLetter": self._dead_letter,
            # Asks the cleaner for a clean (writers send one to register a table); the clean
            # it leads to is told by its timeline entries.
            "CleanRequest": self._no_story,
        }

    def feed(self, item: Recorded | Unreadable | RetentionGap) -> None:
        """Take one event (or a problem the reader met); never raises for bad input."""
        if isinstance(item, Unreadable):
            self._unreadable.append(item)
            return
        if isinstance(item, RetentionGap):
            self._gaps.append(item)
            return
        record = item.record
        envelope = record.get("envelope") or {}
        if envelope.get("table_id") != self.table_id:
            return
        handler = self._handlers.get(item.name)
        if handler is None:
            self._unreadable.append(_problem(item, "unknown_event", f"no story for {item.name}"))
            return
        try:
            handler(item, record)
        except (KeyError, TypeError, ValueError) as err:
            detail = f"{item.name}: {type(err).__name__}: {err}"
            self._unreadable.append(_problem(item, "malformed_event", detail))
            return
        self._events += 1

    def build(self) -> TableHistory:
        """The history as of the events fed so far."""
        stories = {name: self._story(name, acc) for name, acc in self._instants.items()}
        return TableHistory(
            table_id=self.table_id,
            stories=stories,
            locks=self._locks.grants(),
            error_records=self._error_records,
            dead_letters=tuple(self._dead_letters),
            unreadable=tuple(self._unreadable),
            gaps=tuple(self._gaps),
            events=self._events,
        )

    @staticmethod
    def _story(instant: str, acc: _Instant) -> InstantStory:
        return InstantStory(
            instant=instant,
            steps=tuple(acc.steps[s] for s in sorted(acc.steps)),
            heartbeats=tuple(t.freeze() for t in acc.trails.values()),
            expiries=tuple(sorted(acc.expiries.values(), key=lambda e: e.detected_ms)),
            attempts=tuple(acc.attempts.values()),
            job_requests=tuple(acc.job_requests),
            job_results=tuple(acc.job_results),
            cancels=tuple(sorted(acc.cancels.values(), key=lambda c: c.requested_ms)),
            error_records=acc.error_records,
        )

    def _at(self, instant: str) -> _Instant:
        found = self._instants.get(instant)
        if found is None:  # not setdefault: building an _Instant per event costs more than this
            if not instant:
                raise ValueError("the event names no instant")
            found = self._instants[instant] = _Instant()
        return found

    # -- one handler per event ------------------------------------------------------------------

    def _no_story(self, event: Recorded, record: dict[str, Any]) -> None:
        return None

    def _lock_request(self, event: Recorded, record: dict[str, Any]) -> None:
        self._locks.request(record, epoch_ms(record["envelope"]["event_time"]))

    def _lock_reply(self, event: Recorded, record: dict[str, Any]) -> None:
        self._locks.reply(record, epoch_ms(record["envelope"]["event_time"]))

    def _heartbeat(self, event: Recorded, record: dict[str, Any]) -> None:
        if record.get("kind") == "tick":
            return  # the monitor's clock, about no instant
        owner = str(record["owner"])
        acc = self._at(str(record["instant"]))
        trail = acc.trails.get(owner)
        if trail is None:
            trail = _Trail(owner, int(record["interval_ms"]), int(record["tolerable_misses"]))
            acc.trails[owner] = trail
        at = (
            event.broker_ms
            if event.broker_ms is not None
            else epoch_ms(record["envelope"]["event_time"])
        )
        if record.get("kind") == "final":
            trail.final_ms = at
            return
        trail.beats += 1
        trail.seqs.add(int(record["seq"]))
        if trail.last_ms is not None and at - trail.last_ms > trail.longest_gap_ms:
            trail.longest_gap_ms = at - trail.last_ms
            trail.longest_gap_from_ms = trail.last_ms
        trail.first_ms = at if trail.first_ms is None else min(trail.first_ms, at)
        trail.last_ms = at if trail.last_ms is None else max(trail.last_ms, at)

    def _expired(self, event: Recorded, record: dict[str, Any]) -> None:
        envelope = record["envelope"]
        frontier = record.get("frontier_ms")
        self._at(str(record["instant"])).expiries[str(envelope["event_id"])] = Expiry(
            owner=str(record["owner"]),
            last_seen_ms=int(record["last_seen_ms"]),
            detected_ms=int(record["detected_ms"]),
            tolerance_ms=int(record.get("tolerance_ms") or 0),
            frontier_ms=None if frontier is None else int(frontier),
            monitor=str(envelope["producer_id"]),
        )

    def _manifest(self, event: Recorded, record: dict[str, Any]) -> None:
        acc = self._at(str(record["instant"]))
        attempt_id = str(record["task_attempt_id"])
        accepted = any(attempt_id in r.accepted for r in acc.job_requests)
        acc.attempts[attempt_id] = TaskAttempt(
            task_id=str(record["task_id"]),
            task_attempt_id=attempt_id,
            job_id=str(record["job_id"]),
            file_count=int(record["file_count"]),
            total_bytes=int(record["total_bytes"]),
            accepted=accepted,
        )

    def _job_request(self, event: Recorded, record: dict[str, Any]) -> None:
        acc = self._at(str(record["instant"]))
        token = record.get("lock_token")
        request = JobRequest(
            job_id=str(record["job_id"]),
            job_attempt=int(record.get("job_attempt") or 0),
            accepted=tuple(str(a) for a in record["accepted_task_attempt_ids"]),
            lock_token=None if token is None else int(token),
            requester=str(record["envelope"]["producer_id"]),
            event_ms=epoch_ms(record["envelope"]["event_time"]),
        )
        acc.job_requests.append(request)
        for attempt_id in request.accepted:  # manifests usually come first
            if attempt_id in acc.attempts:
                acc.attempts[attempt_id] = replace(acc.attempts[attempt_id], accepted=True)

    def _job_result(self, event: Recorded, record: dict[str, Any]) -> None:
        self._at(str(record["instant"])).job_results.append(
            JobResult(
                job_id=str(record["job_id"]),
                status=str(record["status"]),
                failed_stage=_opt(record.get("failed_stage")),
                error_type=_opt(record.get("error_type")),
                reason=_opt(record.get("reason")),
                recorded=bool(record.get("recorded")),
                committer=str(record["envelope"]["producer_id"]),
                event_ms=epoch_ms(record["envelope"]["event_time"]),
            )
        )

    def _transition(self, event: Recorded, record: dict[str, Any]) -> None:
        payload = json.loads(str(record.get("payload") or "{}"))
        if not isinstance(payload, dict):
            raise ValueError(f"payload is a JSON {type(payload).__name__}, not an object")
        token = record.get("lock_token")
        step = Step(
            seq=int(record["seq"]),
            transition=str(record["transition"]),
            action=str(record["action"]),
            actor=str(record["actor"]),
            lock_token=None if token is None else int(token),
            wall_ms=epoch_ms(record["wall_time"]),
            payload=payload,
        )
        # At-least-once delivery: the same entry may be published twice; keep the first.
        self._at(str(record["instant"])).steps.setdefault(step.seq, step)

    def _cancel_request(self, event: Recorded, record: dict[str, Any]) -> None:
        request_id = str(record["request_id"])
        acc = self._at(str(record["instant"]))
        known = acc.cancels.get(request_id)
        acc.cancels[request_id] = CancelStep(
            request_id=request_id,
            kind=str(record["kind"]),
            requester=str(record["requester"]),
            reason=_opt(record.get("reason")),
            requested_ms=epoch_ms(record["envelope"]["event_time"]),
            outcome=known.outcome if known else None,
            outcome_reason=known.outcome_reason if known else None,
        )

    def _cancel_result(self, event: Recorded, record: dict[str, Any]) -> None:
        request_id = str(record["request_id"])
        acc = self._at(str(record["instant"]))
        known = acc.cancels.get(request_id) or CancelStep(
            request_id, "unknown", "unknown", None, epoch_ms(record["envelope"]["event_time"])
        )
        acc.cancels[request_id] = replace(
            known, outcome=str(record["outcome"]), outcome_reason=_opt(record.get("reason"))
        )

    def _error_record(self, event: Recorded, record: dict[str, Any]) -> None:
        self._error_records += 1
        instant = (record.get("context") or {}).get(ERROR_CONTEXT_INSTANT)
        if instant:
            self._at(str(instant)).error_records += 1

    def _dead_letter(self, event: Recorded, record: dict[str, Any]) -> None:
        self._dead_letters.append(
            Unreadable(
                topic=str(record["topic"]),
                partition=int(record["partition"]),
                offset=int(record["offset"]),
                reason=str(record["reason"]),
                detail=str(record.get("detail") or ""),
            )
        )


def build_history(
    table_id: str, events: Iterable[Recorded | Unreadable | RetentionGap]
) -> TableHistory:
    """Fold ``events`` into the history of table ``table_id``."""
    builder = HistoryBuilder(table_id)
    for event in events:
        builder.feed(event)
    return builder.build()


def _problem(event: Recorded, reason: str, detail: str) -> Unreadable:
    return Unreadable(event.topic, event.partition, event.offset, reason, detail)


def _opt(value: object) -> str | None:
    return None if value is None else str(value)
