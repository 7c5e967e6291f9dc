"""The lock of one table and the pure function that applies one request to it.

timeline-lock keeps one ``TableLock`` per table (changelog-backed) and folds
the table's requests, in the order of their partition of ``lock.requests``, through
:func:`apply`. Everything that decides *who* holds the lock is a function of that request
sequence alone:

- acquire: granted when nobody holds the lock, else queued (FIFO);
- renew / release: take effect only with the holder's fencing token (stale tokens are refused);
- release with no token and an ``acquire_id``: withdraws a waiter that stopped waiting, or
  releases the lease if it was granted meanwhile;
- expire: sent by the service's own timer; takes effect only on the exact lease version it
  names (token and ``expires_ms``), so a renewal that got in first wins.

A lease granted to a waiter counts from when the service last heard from it (its acquire, or
the client's latest resend of it while queued), not from the grant: a client resends a queued
acquire every few seconds, so a live waiter gets nearly a whole ttl, while one whose process
died in the queue gets a lease that has run out already (or nearly) and is expired at once.
Counting from the grant instead let every dead waiter hold the lock for a whole ttl in turn, so
that one crash of several processes blocked the table for several ttls. The client's own view
of its deadline counts from its first send (``lakewarden.clients._lock_io``), never later.

The clock (``now_ms``) only sets ``expires_ms`` values, never a decision. That is what makes
replies safe to send before the new state is durable: after a crash the service restores
each table from its changelog, skips requests it already applied (``applied_offset``) and
re-applies the rest to the same decisions; the timer's judgement that a lease ran out is
itself a request in the log, not a side effect.

Tokens: ``last_token`` increases by one per grant and is never reset (the state of a table is
never deleted), so tokens strictly increase per table across restarts and rebalances.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

RequestKind = Literal["acquire", "renew", "release", "expire"]
ReplyStatus = Literal["granted", "refused", "queued", "expired"]
EndHow = Literal["released", "expired", "withdrawn"]

REQUEST_KINDS: Final[tuple[RequestKind, ...]] = ("acquire", "renew", "release", "expire")
# Acquire ids a table remembers as finished, so a duplicate acquire that arrives after its
# lease ended (a client's resend racing its grant) is refused instead of granted to nobody.
FINISHED_MEMORY: Final = 8


@dataclass(frozen=True, slots=True)
class Route:
    """Where the reply to a request goes: a partition of lock.replies and a message key."""

    partition: int | None
    key: str | None


@dataclass(frozen=True, slots=True)
class Waiter:
    """An acquire waiting its turn."""

    request_id: str
    owner: str
    ttl_ms: int
    route: Route
    queued_ms: int
    # When the service last heard the acquire (it or a resend): the lease counts from here.
    seen_ms: int | None = None

    @property
    def heard_ms(self) -> int:
        return self.queued_ms if self.seen_ms is None else self.seen_ms


@dataclass(frozen=True, slots=True)
class Holder:
    """The current lease. ``expires_ms`` is on the service clock."""

    request_id: str
    owner: str
    token: int
    ttl_ms: int
    route: Route
    granted_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class TableLock:
    """The lock of one table: holder, FIFO queue, last token, last applied request offset."""

    last_token: int = 0
    applied_offset: int = -1
    holder: Holder | None = None
    queue: tuple[Waiter, ...] = ()
    finished: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded, validated ``LockRequest`` (see ``schemas/LockRequest.avsc``)."""

    kind: RequestKind
    request_id: str
    owner: str
    ttl_ms: int
    route: Route
    token: int | None = None
    acquire_id: str | None = None
    lease_expires_ms: int | None = None
    wants_reply: bool = True  # False: the sender does not wait for an answer (fire and forget)


@dataclass(frozen=True, slots=True)
class Reply:
    """A ``LockReply`` to send (see ``schemas/LockReply.avsc``)."""

    request_id: str
    owner: str
    status: ReplyStatus
    route: Route
    token: int | None = None
    lease_expires_ms: int | None = None
    reason: str | None = None
    queue_position: int | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """A lease handed out (for metrics): its token and how long the request waited."""

    token: int
    waited_ms: int


@dataclass(frozen=True, slots=True)
class Ended:
    """A lease that ended (for metrics): how, and how long it was held."""

    token: int
    how: EndHow
    held_ms: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of applying one request: the new state and what to tell whom."""

    state: TableLock
    replies: tuple[Reply, ...] = ()
    grants: tuple[Grant, ...] = ()
    ended: tuple[Ended, ...] = ()
    duplicate: bool = False


def validate(request: Request) -> str | None:
    """Why ``request`` cannot be applied (it belongs in the dead-letter queue), or ``None``."""
    if not request.request_id:
        return "request_id is empty"
    if not request.owner:
        return "owner is empty"
    if request.kind in ("acquire", "renew") and request.ttl_ms <= 0:
        return f"{request.kind} needs ttl_ms > 0, got {request.ttl_ms}"
    if request.kind == "renew" and request.token is None:
        return "renew needs the token of the lease"
    if request.kind == "release" and request.token is None and not request.acquire_id:
        return "release needs the token of the lease or the acquire_id to withdraw"
    if request.kind == "expire" and (request.token is None or request.lease_expires_ms is None):
        return "expire needs token and lease_expires_ms"
    return None


def apply(state: TableLock, request: Request, *, offset: int, now_ms: int) -> Outcome:
    """Apply one valid request (``validate`` returned ``None``) read at ``offset``.

    A request at or below ``state.applied_offset`` was applied before (at-least-once
    redelivery after a restart): it changes nothing and is answered by nobody.
    """
    if offset <= state.applied_offset:
        return Outcome(state, duplicate=True)
    state = replace(state, applied_offset=offset)
    if request.kind == "acquire":
        return _acquire(state, request, now_ms)
    if request.kind == "renew":
        return _renew(state, request, now_ms)
    if request.kind == "release":
        return _release(state, request, now_ms)
    return _expire(state, request, now_ms)


def effective_expiry_ms(holder: Holder, *, owned_since_ms: int) -> int:
    """When the service may expire ``holder``: its ``expires_ms``, but never earlier than one
    full ttl after this service instance took over the table (``owned_since_ms``).

    After a restart or a rebalance the holder's renewals may have gone unanswered while no
    instance served the table; the new owner gives it a whole ttl to renew rather than trust
    a deadline that passed while nobody could take its renewal.
    """
    return max(holder.expires_ms, owned_since_ms + holder.ttl_ms)


def due_expiry(state: TableLock, *, now_ms: int, owned_since_ms: int) -> Holder | None:
    """The holder whose lease ran out by ``now_ms``, if any (the timer then sends expire)."""
    holder = state.holder
    if holder is None or now_ms < effective_expiry_ms(holder, owned_since_ms=owned_since_ms):
        return None
    return holder


def expire_request(holder: Holder, *, request_id: str, owner: str) -> Request:
    """The ``expire`` request the timer sends for ``holder``'s current lease version."""
    return Request(
        kind="expire",
        request_id=request_id,
        owner=owner,
        ttl_ms=0,
        route=Route(None, None),
        token=holder.token,
        lease_expires_ms=holder.expires_ms,
    )


# -- the four kinds --------------------------------------------------------------------------


def _acquire(state: TableLock, request: Request, now_ms: int) -> Outcome:
    holder = state.holder
    if holder is not None and holder.request_id == request.request_id:
        return Outcome(state, (_granted(holder, request),))  # a resend: answer again
    for position, waiter in enumerate(state.queue, start=1):
        if waiter.request_id == request.request_id:  # a resend: the waiter is still there
            heard = replace(waiter, seen_ms=max(now_ms, waiter.heard_ms))
            queue = (*state.queue[: position - 1], heard, *state.queue[position:])
            return Outcome(replace(state, queue=queue), (_queued(request, position),))
    if request.request_id in state.finished:
        reason = (
            f"acquire {request.request_id} already ended (released, withdrawn or expired). "
            "Help: a new acquire needs a new request id."
        )
        return Outcome(state, (_refused(request, reason),))
    waiter = Waiter(request.request_id, request.owner, request.ttl_ms, request.route, now_ms)
    state = replace(state, queue=(*state.queue, waiter))
    if holder is None:
        return _grant_next(state, now_ms)
    return Outcome(state, (_queued(request, len(state.queue)),))


def _renew(state: TableLock, request: Request, now_ms: int) -> Outcome:
    holder = state.holder
    if holder is None or holder.token != request.token:
        return Outcome(state, (_refused(request, _stale(state, request)),))
    holder = replace(holder, ttl_ms=request.ttl_ms, expires_ms=now_ms + request.ttl_ms)
    return Outcome(replace(state, holder=holder), (_granted(holder, request),))


def _release(state: TableLock, request: Request, now_ms: int) -> Outcome:
    holder = state.holder
    if request.token is not None:
        if holder is None or holder.token != request.token:
            return Outcome(state, (_refused(request, _stale(state, request)),))
        return _end(state, "released", now_ms, answer=_ok(request, holder.token))
    acquire_id = request.acquire_id or ""
    if holder is not None and holder.request_id == acquire_id:
        return _end(state, "withdrawn", now_ms, answer=_ok(request, holder.token))
    queue = tuple(waiter for waiter in state.queue if waiter.request_id != acquire_id)
    # Remember it even when it is unknown: the acquire it withdraws may be resent later.
    state = replace(state, queue=queue, finished=_remember(state.finished, acquire_id))
    return Outcome(state, (_ok(request, None),))


def _expire(state: TableLock, request: Request, now_ms: int) -> Outcome:
    holder = state.holder
    if (
        holder is None
        or holder.token != request.token
        or holder.expires_ms != request.lease_expires_ms
    ):
        return Outcome(state)  # renewed, released or expired meanwhile: nothing to do
    notice = Reply(
        holder.request_id,
        holder.owner,
        "expired",
        holder.route,
        token=holder.token,
        lease_expires_ms=holder.expires_ms,
        reason="the lease was not renewed within its ttl",
    )
    return _end(state, "expired", now_ms, answer=notice)


# -- helpers ---------------------------------------------------------------------------------


def _end(state: TableLock, how: EndHow, now_ms: int, *, answer: Reply) -> Outcome:
    """End the current lease and hand the lock to the next waiter, if any."""
    holder = state.holder
    assert holder is not None  # callers checked
    ended = Ended(holder.token, how, max(0, now_ms - holder.granted_ms))
    state = replace(state, holder=None, finished=_remember(state.finished, holder.request_id))
    nxt = _grant_next(state, now_ms)
    return replace(nxt, replies=(answer, *nxt.replies), ended=(ended,))


def _grant_next(state: TableLock, now_ms: int) -> Outcome:
    if not state.queue:
        return Outcome(state)
    waiter, rest = state.queue[0], state.queue[1:]
    token = state.last_token + 1
    holder = Holder(
        waiter.request_id,
        waiter.owner,
        token,
        waiter.ttl_ms,
        waiter.route,
        granted_ms=now_ms,
        # from when it was last heard (module docstring): a dead waiter's lease is over
        expires_ms=min(now_ms, waiter.heard_ms) + waiter.ttl_ms,
    )
    state = replace(state, last_token=token, holder=holder, queue=rest)
    reply = Reply(
        waiter.request_id,
        waiter.owner,
        "granted",
        waiter.route,
        token=token,
        lease_expires_ms=holder.expires_ms,
    )
    grant = Grant(token, max(0, now_ms - waiter.queued_ms))
    return Outcome(state, (reply,), grants=(grant,))


def _remember(finished: tuple[str, ...], request_id: str) -> tuple[str, ...]:
    if request_id in finished:
        return finished
    return (*finished, request_id)[-FINISHED_MEMORY:]


def _stale(state: TableLock, request: Request) -> str:
    current = "nobody holds it" if state.holder is None else f"the holder has {state.holder.token}"
    return (
        f"stale token {request.token}: {current}. The lease was lost (expired or released); "
        "Help: stop, acquire again, and reload the timeline before appending."
    )


def _granted(holder: Holder, request: Request) -> Reply:
    return Reply(
        request.request_id,
        request.owner,
        "granted",
        request.route,
        token=holder.token,
        lease_expires_ms=holder.expires_ms,
    )


def _ok(request: Request, token: int | None) -> Reply:
    return Reply(request.request_id, request.owner, "granted", request.route, token=token)


def _queued(request: Request, position: int) -> Reply:
    return Reply(
        request.request_id, request.owner, "queued", request.route, queue_position=position
    )


def _refused(request: Request, reason: str) -> Reply:
    return Reply(
        request.request_id,
        request.owner,
        "refused",
        request.route,
        token=request.token,
        reason=reason,
    )
