"""Re-driving timeline-lock's pure state module over a table's recorded lock requests.

Every decision of timeline-lock is a function of the table's request sequence
(``lakewarden.lock.state``): so folding the recorded ``LockRequest`` events, in their
partition's order, through the same ``apply`` must give the replies that were recorded on
``lock.replies``. ``redrive_locks`` does that and names every request whose recomputed
answers (a status, a token, a queue position) differ from the recorded answers to it: one
recorded but not recomputed, or recomputed but never recorded.

The clock only sets lease deadlines (``expires_ms``), never a decision; but an ``expire``
request names the deadline it saw, so the re-drive must reproduce deadlines exactly. It
takes each request's broker time as ``now`` and then adopts the deadline that the service
recorded in its reply for a grant or renewal, which is the service's own clock at that moment.

What cannot be re-driven is said, not guessed: when ``lock.requests`` no longer holds the
table's oldest requests (retention), the state they built is unknown and nothing is compared.
Requests the service would dead-letter (``parse_request`` refuses them) are compared with the
refusal it sends, when it sends one.

The point is to run timeline-lock's own decision function, not a copy of it: the state
machine and request parsing live in the library (``lakewarden.lock``) and the service imports
them from there. Only the CLI imports this module.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from lakewarden.events import InvalidEvent
from lakewarden.events.topics import LOCK_REPLIES, LOCK_REQUESTS
from lakewarden.history.model import Recorded, RetentionGap
from lakewarden.lock.protocol import parse_request, refusal_for
from lakewarden.lock.state import Grant, Reply, Request, TableLock, apply
from lakewarden.settings import Settings

# (status, token, queue position): what a reply decides; deadlines and reasons are not compared.
Decision = tuple[str, int | None, int | None]


@dataclass(frozen=True, slots=True)
class LockDifference:
    """A request whose recorded answers differ from what the state module decides."""

    request_id: str
    kind: str
    offset: int
    recorded: tuple[Decision, ...]
    recomputed: tuple[Decision, ...]

    def describe(self) -> str:
        return (
            f"lock request {self.request_id} ({self.kind}, offset {self.offset}): recorded "
            f"{_decisions(self.recorded)}, the state module decides {_decisions(self.recomputed)}"
        )


@dataclass(frozen=True, slots=True)
class LockReplayReport:
    """How the re-drive went: requests applied, the differences, and why it did not run
    (``skipped``) when the recorded requests are not whole."""

    requests: int
    replies: int
    differences: tuple[LockDifference, ...]
    skipped: str | None = None

    @property
    def clean(self) -> bool:
        return not self.differences and self.skipped is None


def redrive_locks(
    settings: Settings,
    table_id: str,
    events: Iterable[Recorded | RetentionGap],
) -> LockReplayReport:
    """Fold the table's recorded lock requests through timeline-lock's ``apply`` and compare
    the answers with the recorded replies. ``events`` are the table's events on
    ``lock.requests`` and ``lock.replies`` read from the beginning (``RetentionGap`` items
    say what is gone)."""
    requests_topic, replies_topic = LOCK_REQUESTS.name(settings), LOCK_REPLIES.name(settings)
    requests: list[Recorded] = []
    recorded: dict[str, list[Recorded]] = defaultdict(list)
    gaps: list[RetentionGap] = []
    for item in events:
        if isinstance(item, RetentionGap):
            gaps.append(item)
        elif item.topic == requests_topic and item.name == "LockRequest":
            requests.append(item)
        elif item.topic == replies_topic and item.name == "LockReply":
            recorded[str(item.record["request_id"])].append(item)
    replies = sum(len(r) for r in recorded.values())
    lost = [g for g in gaps if g.topic == requests_topic]
    if lost:
        where = ", ".join(f"partition {g.partition} below offset {g.low_offset}" for g in lost)
        return LockReplayReport(
            len(requests),
            replies,
            (),
            skipped=f"{requests_topic} no longer holds the oldest requests ({where}); the lock "
            "state they built is unknown, so no decision was re-driven",
        )
    requests.sort(key=lambda r: (r.partition, r.offset))
    recomputed = _recompute(requests, recorded, replies_topic)
    differences = []
    for request in requests:
        request_id = str(request.record["request_id"])
        mine = recomputed.pop(request_id, set())
        theirs = {_decision_of(r.record) for r in recorded.get(request_id, ())}
        if mine != theirs:
            kind = str(request.record["kind"])
            differences.append(
                LockDifference(
                    request_id,
                    kind,
                    request.offset,
                    tuple(sorted(theirs, key=str)),
                    tuple(sorted(mine, key=str)),
                )
            )
    return LockReplayReport(len(requests), replies, tuple(differences))


def _recompute(
    requests: list[Recorded], recorded: dict[str, list[Recorded]], replies_topic: str
) -> dict[str, set[Decision]]:
    """The decisions the state module takes for ``requests``, by the request id answered."""
    state = TableLock()
    decided: dict[str, set[Decision]] = defaultdict(set)
    for event in requests:
        record = event.record
        table_id = str(record["envelope"]["table_id"])
        try:
            # The routing checks (key, partition) passed when it was produced: what is
            # re-judged is the request itself.
            _, request = parse_request(
                "LockRequest",
                record,
                key=table_id.encode(),
                partition=0,
                partitions=1,
                reply_topic=str(record["reply_topic"]) or replies_topic,
                reply_partitions=1 << 30,
            )
        except InvalidEvent as err:
            refusal = refusal_for(record, err.detail)
            if refusal is not None:
                decided[refusal.request_id].add(_decision(refusal))
            continue
        now = event.broker_ms if event.broker_ms is not None else 0
        outcome = apply(state, request, offset=event.offset, now_ms=now)
        for reply in outcome.replies:
            if request.wants_reply or reply.request_id != request.request_id:
                decided[reply.request_id].add(_decision(reply))
        state = _recorded_deadline(outcome.state, request, outcome.grants, recorded)
    return decided


def _recorded_deadline(
    state: TableLock, request: Request, grants: Iterable[Grant], recorded: dict[str, list[Recorded]]
) -> TableLock:
    """``state`` with the holder's deadline the service recorded, when this request set it
    afresh (a grant, a renewal): the service's clock, not the broker's, set it."""
    holder = state.holder
    if holder is None:
        return state
    if any(g.token == holder.token for g in grants):
        answered = holder.request_id
    elif request.kind == "renew" and request.token == holder.token:
        answered = request.request_id
    else:
        return state
    deadline = next(
        (
            int(r.record["lease_expires_ms"])
            for r in recorded.get(answered, ())
            if r.record["status"] == "granted"
            and r.record.get("token") == holder.token
            and r.record.get("lease_expires_ms") is not None
        ),
        None,
    )
    if deadline is None:
        return state
    return replace(state, holder=replace(holder, expires_ms=deadline))


def _decision(reply: Reply) -> Decision:
    return (reply.status, reply.token, reply.queue_position)


def _decision_of(record: dict[str, object]) -> Decision:
    token, position = record.get("token"), record.get("queue_position")
    return (
        str(record["status"]),
        None if token is None else int(str(token)),
        None if position is None else int(str(position)),
    )


def _decisions(decisions: tuple[Decision, ...]) -> str:
    if not decisions:
        return "no answer"
    return ", ".join(
        status
        + ("" if token is None else f" token {token}")
        + ("" if position is None else f" at queue position {position}")
        for status, token, position in decisions
    )


__all__ = ["Decision", "LockDifference", "LockReplayReport", "redrive_locks"]
