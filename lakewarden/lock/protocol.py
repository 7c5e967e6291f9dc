"""Between Avro records and the lock state's values: parsing requests, building replies.

Parsing is where a decodable but unusable request is caught (``InvalidEvent`` carries the
dead-letter reason); ``state.apply`` only ever sees valid requests.
"""

from __future__ import annotations

from typing import Any

from lakewarden.clients import table_partition
from lakewarden.events import InvalidEvent, make_event
from lakewarden.lock.state import REQUEST_KINDS, Reply, Request, Route, validate


def parse_request(
    name: str,
    record: dict[str, Any],
    *,
    key: bytes | None,
    partition: int,
    partitions: int,
    reply_topic: str,
    reply_partitions: int,
) -> tuple[str, Request]:
    """The table id and the request in a decoded event read from ``partition``.

    Raises:
        InvalidEvent: not a LockRequest (``unexpected_event``), a key that is not the table
            id (``key_mismatch``), the wrong partition for the table (``misrouted``), or
            fields that do not make a request (``invalid_request``).
    """
    if name != "LockRequest":
        raise InvalidEvent("unexpected_event", f"a {name} event on the lock requests topic")
    table_id = str(record["envelope"]["table_id"])
    if not table_id or key != table_id.encode():
        raise InvalidEvent("key_mismatch", f"message key {key!r} is not the table id {table_id!r}")
    expected = table_partition(table_id, partitions)
    if partition != expected:
        raise InvalidEvent(
            "misrouted",
            f"request for table {table_id} on partition {partition}, expected {expected} "
            "(crc32 of the table id modulo the partition count)",
        )
    request = _request(record)
    problem = validate(request) or _route_problem(record, reply_topic, reply_partitions)
    if problem is not None:
        raise InvalidEvent("invalid_request", problem)
    return table_id, request


def reply_record(reply: Reply, *, table_id: str, producer_id: str) -> dict[str, Any]:
    """The ``LockReply`` record for ``reply``."""
    return make_event(
        "LockReply",
        table_id=table_id,
        producer_id=producer_id,
        request_id=reply.request_id,
        owner=reply.owner,
        status=reply.status,
        token=reply.token,
        lease_expires_ms=reply.lease_expires_ms,
        reason=reply.reason,
        queue_position=reply.queue_position,
    )


def refusal_for(record: dict[str, Any], reason: str) -> Reply | None:
    """A refusal to send for an invalid request when it says where replies go, else None."""
    request_id, owner = record.get("request_id"), record.get("owner")
    partition = record.get("reply_partition")
    if not request_id or not isinstance(owner, str):
        return None
    route = Route(partition if isinstance(partition, int) else None, record.get("reply_key"))
    return Reply(str(request_id), owner, "refused", route, reason=reason)


def _request(record: dict[str, Any]) -> Request:
    kind = record["kind"]
    if kind not in REQUEST_KINDS:  # the Avro enum already guarantees it; keeps mypy honest
        raise InvalidEvent("invalid_request", f"unknown kind {kind!r}")
    return Request(
        kind=kind,
        request_id=str(record["request_id"]),
        owner=str(record["owner"]),
        ttl_ms=int(record["ttl_ms"]),
        route=Route(record.get("reply_partition"), record.get("reply_key")),
        token=record.get("token"),
        acquire_id=record.get("acquire_id"),
        lease_expires_ms=record.get("lease_expires_ms"),
        wants_reply=bool(record["reply_topic"]),
    )


def _route_problem(record: dict[str, Any], reply_topic: str, reply_partitions: int) -> str | None:
    if record["kind"] == "expire" or not record["reply_topic"]:
        return None  # nobody is answered: the timer's own request, or fire and forget
    if record["reply_topic"] != reply_topic:
        return f"reply_topic {record['reply_topic']!r}: this service answers on {reply_topic}"
    partition = record.get("reply_partition")
    if partition is not None and not 0 <= partition < reply_partitions:
        return f"reply_partition {partition} is not a partition of {reply_topic}"
    return None
