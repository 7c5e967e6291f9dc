"""Encoding many ``ErrorRecord`` events of one task attempt: the shared parts encoded once.

A task attempt's failed records share most of their event: the table, the producer, the
schema version, the batch's schema text and most of ``context`` (instant, table, attempt,
job, operation). fastavro encodes every field of every event again and costs about as much
per event as everything else the task does for a bad row. ``ErrorRecordEncoder`` writes the
Avro binary encoding of the ``ErrorRecord`` schema itself, with those shared parts encoded
once per attempt (or per batch) and only the per-record fields (ids, the record's JSON, its
message, its context values) encoded per event. The bytes are exactly what
``EventCodec.encode`` produces for the same record (the unit tests compare them), so any
consumer decodes them with the schema files alone.

Avro binary, as used here: ``long``/``int`` are zig-zag varints, ``string`` is its byte length
then its UTF-8 bytes, a union is the branch index then the value, a map is one block (entry
count, then key/value pairs) followed by a zero count.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from lakewarden.events.codec import MAGIC, EventCodec, default_codec

__all__ = ["ErrorRecordEncoder", "new_uuids"]

EVENT = "ErrorRecord"
# The fields of ErrorRecord and Envelope this encoder writes, in schema order; checked against
# the schema files when an encoder is made, so a schema change cannot go unnoticed.
_FIELDS = ("envelope", "uid", "ts", "schema", "record", "message", "context")
_ENVELOPE = ("event_id", "event_time", "table_id", "producer_id", "schema_version")


class ErrorRecordEncoder:
    """Encodes the ``ErrorRecord`` events of one producer and table (see the module doc).

    ``shared_context``: the context entries every event carries; ``encode`` adds the rest."""

    def __init__(
        self,
        *,
        table_id: str,
        producer_id: str,
        schema: str | None,
        shared_context: Mapping[str, str],
        codec: EventCodec | None = None,
    ) -> None:
        codec = codec or default_codec()
        event = codec.schema(EVENT)
        _check_layout(event.parsed)
        self.table_id = table_id
        self.key = table_id.encode()
        self._header = MAGIC + event.fingerprint
        self._envelope_tail = (
            _string(table_id) + _string(producer_id) + _long(event.version)
        )  # after event_id and event_time
        self._schema = _optional(schema)
        self._shared = b"".join(_string(k) + _string(v) for k, v in shared_context.items())
        self._shared_count = len(shared_context)
        self._shared_keys = frozenset(shared_context)
        self._time = (-1, b"", b"")  # the last ts_ms, as a long and as a string (one batch)

    def encode(
        self,
        *,
        event_id: str,
        uid: str,
        ts_ms: int,
        record: str | None,
        message: str | None,
        context: Mapping[str, str],
    ) -> bytes:
        """One event: ``context`` holds the entries beyond the shared ones (written after
        them; a key given in both would be a duplicate map key, refused).

        Raises: ValueError (``context`` repeats a shared key)."""
        entries = self._shared_count + len(context)
        if not self._shared_keys.isdisjoint(context):
            raise ValueError(f"context keys {sorted(context)} repeat shared context keys")
        extra = b"".join(_string(k) + _string(v) for k, v in context.items())
        if self._time[0] != ts_ms:
            self._time = (ts_ms, _long(ts_ms), _string(str(ts_ms)))
        _, ts_long, ts_string = self._time
        return b"".join(
            (
                self._header,
                _string(event_id),
                ts_long,
                self._envelope_tail,
                _string(uid),
                ts_string,
                self._schema,
                _optional(record),
                _optional(message),
                b"\x02" + _long(entries) + self._shared + extra + b"\x00",  # union branch 1: map
            )
        )


# The RFC 4122 variant: the top two bits of the 17th hex digit are 10.
_VARIANT = {f"{d:x}": f"{(d & 0x3) | 0x8:x}" for d in range(16)}


def new_uuids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs in canonical text form, from one read of the OS's
    randomness (``uuid.uuid4`` reads it once per UUID, a system call each), formatted as
    ``str(uuid.UUID(bytes=..., version=4))`` does, without building the objects."""
    text = os.urandom(16 * count).hex()
    return [
        f"{text[i : i + 8]}-{text[i + 8 : i + 12]}-4{text[i + 13 : i + 16]}-"
        f"{_VARIANT[text[i + 16]]}{text[i + 17 : i + 20]}-{text[i + 20 : i + 32]}"
        for i in range(0, len(text), 32)
    ]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _varint(value: int) -> bytes:
    """Avro's zig-zag varint of a long (or int)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths and small values are looked up: this runs a dozen times per event.
_SMALL = tuple(_varint(n) for n in range(4096))


def _long(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < 4096 else _varint(value)


def _string(value: str) -> bytes:
    data = value.encode()
    n = len(data)
    return (_SMALL[n] if n < 4096 else _varint(n)) + data


def _optional(value: str | None) -> bytes:
    """A ``["null", "string"]`` union."""
    return b"\x00" if value is None else b"\x02" + _string(value)


def _check_layout(parsed: Mapping[str, object]) -> None:
    """Raises: RuntimeError (the ErrorRecord schema is not the one this encoder writes)."""
    fields = parsed.get("fields")
    names = tuple(f["name"] for f in fields) if isinstance(fields, list) else ()
    envelope = fields[0]["type"] if isinstance(fields, list) and fields else {}
    inner = envelope.get("fields") if isinstance(envelope, dict) else None
    envelope_names = tuple(f["name"] for f in inner) if isinstance(inner, list) else ()
    if names != _FIELDS or envelope_names != _ENVELOPE:
        raise RuntimeError(
            f"ErrorRecordEncoder writes fields {_FIELDS} (envelope {_ENVELOPE}), but the "
            f"ErrorRecord schema has {names} (envelope {envelope_names}). Help: update "
            "lakewarden/errortable/encoder.py with the schema."
        )
