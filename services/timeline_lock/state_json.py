"""The stored form of a table's lock: what the lock table holds and its changelog carries.

A ``TableLock`` is stored as a JSON-able dict (as the faust version of the service stored
it), so the changelog stays readable with any tool. ``lock_from_json(lock_to_json(x)) == x``.
"""

from __future__ import annotations

from typing import Any

from lakewarden.lock.state import Holder, Route, TableLock, Waiter


def lock_to_json(lock: TableLock) -> dict[str, Any]:
    """The stored form of ``lock``."""
    return {
        "last_token": lock.last_token,
        "applied_offset": lock.applied_offset,
        "holder": None if lock.holder is None else _holder_json(lock.holder),
        "queue": [_waiter_json(waiter) for waiter in lock.queue],
        "finished": list(lock.finished),
    }


def lock_from_json(data: dict[str, Any] | None) -> TableLock:
    """The inverse of ``lock_to_json``; ``None`` (a table never seen) is the empty lock.

    Raises:
        KeyError, TypeError, ValueError: ``data`` is not a ``lock_to_json`` value.
    """
    if data is None:
        return TableLock()
    holder = data["holder"]
    return TableLock(
        last_token=int(data["last_token"]),
        applied_offset=int(data["applied_offset"]),
        holder=None if holder is None else _holder_from(holder),
        queue=tuple(_waiter_from(item) for item in data["queue"]),
        finished=tuple(str(item) for item in data["finished"]),
    )


def due_expiry_json(data: dict[str, Any], *, now_ms: int, owned_since_ms: int) -> Holder | None:
    """``state.due_expiry`` on a stored lock, decoding only an overdue holder (the timer scans
    every table several times a second).

    Raises:
        KeyError, TypeError, ValueError: ``data`` is not a ``lock_to_json`` value.
    """
    holder = data.get("holder")
    if holder is None:
        return None
    if now_ms < max(int(holder["expires_ms"]), owned_since_ms + int(holder["ttl_ms"])):
        return None
    return _holder_from(holder)


def _route_json(route: Route) -> list[Any]:
    return [route.partition, route.key]


def _route_from(data: list[Any]) -> Route:
    partition, key = data
    return Route(None if partition is None else int(partition), key)


def _holder_json(holder: Holder) -> dict[str, Any]:
    return {
        "request_id": holder.request_id,
        "owner": holder.owner,
        "token": holder.token,
        "ttl_ms": holder.ttl_ms,
        "route": _route_json(holder.route),
        "granted_ms": holder.granted_ms,
        "expires_ms": holder.expires_ms,
    }


def _holder_from(data: dict[str, Any]) -> Holder:
    return Holder(
        request_id=str(data["request_id"]),
        owner=str(data["owner"]),
        token=int(data["token"]),
        ttl_ms=int(data["ttl_ms"]),
        route=_route_from(data["route"]),
        granted_ms=int(data["granted_ms"]),
        expires_ms=int(data["expires_ms"]),
    )


def _waiter_json(waiter: Waiter) -> dict[str, Any]:
    return {
        "request_id": waiter.request_id,
        "owner": waiter.owner,
        "ttl_ms": waiter.ttl_ms,
        "route": _route_json(waiter.route),
        "queued_ms": waiter.queued_ms,
        "seen_ms": waiter.seen_ms,
    }


def _waiter_from(data: dict[str, Any]) -> Waiter:
    return Waiter(
        request_id=str(data["request_id"]),
        owner=str(data["owner"]),
        ttl_ms=int(data["ttl_ms"]),
        route=_route_from(data["route"]),
        queued_ms=int(data["queued_ms"]),
        seen_ms=None if data.get("seen_ms") is None else int(data["seen_ms"]),
    )
