"""The wire contract between lock clients and timeline-lock, beyond the Avro schemas.

Routing (both sides compute it the same way, so neither depends on a client library's
default partitioner):

- a request for table ``t`` goes to partition ``crc32(t) % P`` of ``lock.requests`` (key ``t``).
  All requests of one table must meet in one partition: the service keeps a table's lock in
  the partition its requests arrive on, so a request routed elsewhere would see another
  (empty) lock. The service dead-letters requests that arrive on any other partition.
- a reply goes to the partition of ``lock.replies`` the request names (``reply_partition``),
  keyed by the request's ``reply_key`` (the client id). A client reads only its partition and
  skips other clients' replies by key, without decoding them.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

from lakewarden.events.envelope import make_event

RequestKind = Literal["acquire", "renew", "release", "expire"]


def table_partition(table_id: str, partitions: int) -> int:
    """The partition of ``lock.requests`` that carries every request for ``table_id``."""
    return zlib.crc32(table_id.encode()) % partitions


def ttl_ms(ttl_s: float) -> int:
    """A lease's ``ttl_ms`` on the wire for ``ttl_s`` seconds (at least 1 ms)."""
    return max(1, round(ttl_s * 1000))


def client_partition(client_id: str, partitions: int) -> int:
    """The partition of ``lock.replies`` a client reads by default."""
    return zlib.crc32(client_id.encode()) % partitions


def lock_request(
    *,
    table_id: str,
    producer_id: str,
    request_id: str,
    kind: RequestKind,
    owner: str,
    ttl_ms: int,
    reply_topic: str,
    reply_partition: int | None,
    reply_key: str | None,
    token: int | None = None,
    acquire_id: str | None = None,
    lease_expires_ms: int | None = None,
) -> dict[str, Any]:
    """A ``LockRequest`` record (``schemas/LockRequest.avsc``) with a fresh envelope."""
    return make_event(
        "LockRequest",
        table_id=table_id,
        producer_id=producer_id,
        request_id=request_id,
        kind=kind,
        owner=owner,
        ttl_ms=ttl_ms,
        token=token,
        reply_topic=reply_topic,
        reply_partition=reply_partition,
        reply_key=reply_key,
        acquire_id=acquire_id,
        lease_expires_ms=lease_expires_ms,
    )
