"""Pairing lock requests with timeline-lock's replies, whatever order they were read in.

Requests (``lock.requests``, keyed by table) and replies (``lock.replies``, keyed by client)
live on different topics, so the reader may hand the fold a reply before its request. Both are
kept as they come and paired by request id only when the grants are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakewarden.history.model import LockGrant


@dataclass(frozen=True, slots=True)
class _Request:
    kind: str
    owner: str
    at: int
    token: int | None
    acquire_id: str | None = None  # a release with no token withdraws this acquire


@dataclass(frozen=True, slots=True)
class _Reply:
    request_id: str
    status: str
    owner: str
    at: int
    token: int | None
    reason: str | None


class LockLedger:
    """The lock requests and replies of one table."""

    def __init__(self) -> None:
        self._requests: dict[str, _Request] = {}
        self._replies: list[_Reply] = []

    def request(self, record: dict[str, Any], at: int) -> None:
        token = record.get("token")
        acquire_id = record.get("acquire_id")
        self._requests.setdefault(
            str(record["request_id"]),
            _Request(
                str(record["kind"]),
                str(record["owner"]),
                at,
                _int(token),
                None if acquire_id is None else str(acquire_id),
            ),
        )

    def reply(self, record: dict[str, Any], at: int) -> None:
        reason = record.get("reason")
        self._replies.append(
            _Reply(
                str(record["request_id"]),
                str(record["status"]),
                str(record["owner"]),
                at,
                _int(record.get("token")),
                None if reason is None else str(reason),
            )
        )

    def grants(self) -> tuple[LockGrant, ...]:
        """One ``LockGrant`` per acquire, oldest first, with its release or expiry."""
        grants: dict[str, LockGrant] = {
            request_id: LockGrant(request_id, request.owner, requested_ms=request.at)
            for request_id, request in self._requests.items()
            if request.kind == "acquire"
        }
        for reply in self._replies:
            request = self._requests.get(reply.request_id)
            if reply.status in ("granted", "refused") and (
                request is None or request.kind == "acquire"
            ):
                grant = grants.get(reply.request_id) or LockGrant(reply.request_id, reply.owner)
                if reply.status == "granted" and grant.token is None:
                    grants[reply.request_id] = _with(grant, granted_ms=reply.at, token=reply.token)
                elif reply.status == "refused":
                    grants[reply.request_id] = _with(grant, refused=reply.reason or "refused")
        by_token = {g.token: key for key, g in grants.items() if g.token is not None}
        for reply in self._replies:
            if reply.status == "expired" and reply.token in by_token:
                key = by_token[reply.token]
                grants[key] = _with(grants[key], expired_ms=reply.at)
        for request in self._requests.values():
            if request.kind != "release":
                continue
            # A release names the lease by token; a client that stopped waiting names its
            # acquire instead, which ends the lease if it was granted meanwhile.
            ended: str | None = None
            if request.token is not None:
                ended = by_token.get(request.token)
            elif request.acquire_id in grants:
                ended = request.acquire_id
            if ended is not None and grants[ended].token is not None:
                grants[ended] = _with(grants[ended], released_ms=request.at)
        return tuple(sorted(grants.values(), key=_order))


def _with(grant: LockGrant, **changes: Any) -> LockGrant:
    values = {name: getattr(grant, name) for name in grant.__dataclass_fields__}
    return LockGrant(**{**values, **changes})


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _order(grant: LockGrant) -> tuple[int, int]:
    return (grant.requested_ms or grant.granted_ms or 0, grant.token or 0)
