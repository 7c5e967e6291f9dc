"""Avro single-object encoding of lakewarden events.

A message is ``C3 01`` + the writer schema's 8-byte CRC-64-AVRO fingerprint (little-endian) +
the schemaless Avro body. Any consumer decodes any message from the schema files alone: the
fingerprint selects the writer schema (current or ``schemas/history/``) and fastavro resolves
it to the current schema of the same event, so a reader that added a field with a default reads
messages written before the change.

Records are plain dicts (the hot path stays in fastavro's C code). Decoded values are what
fastavro returns: enums as ``str``, ``timestamp-millis`` fields (``envelope.event_time``) as
timezone-aware UTC ``datetime``; encoding accepts a ``datetime`` or epoch milliseconds there.
A codec built with ``timestamps="epoch_ms"`` (``epoch_ms_codec()``) decodes those fields as
the epoch milliseconds they hold instead: the readers of many events that only compute with
the times (history, replay) skip building two ``datetime`` objects per message, a third of
the decode time of a timeline event.

Every failure to decode is an ``EventDecodeError`` whose ``reason`` is one of
``DecodeReason``; callers dead-letter the message and keep going.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from io import BytesIO
from typing import Any, Final, Literal, NamedTuple, cast, get_args

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from lakewarden.errors import NonRetryableError
from lakewarden.events._schemas import (
    EventSchema,
    SchemaSet,
    default_schema_dir,
    load_schema_set,
)

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10  # magic (2) + fingerprint (8)

DecodeReason = Literal["too_short", "bad_magic", "unknown_fingerprint", "corrupt_body"]
DECODE_REASONS: Final[tuple[str, ...]] = get_args(DecodeReason)


class EventDecodeError(NonRetryableError):
    """A message is not a lakewarden event this process can read.

    ``reason`` says which check failed (one of ``DECODE_REASONS``); redelivering the same
    bytes fails the same way, so the message belongs in the dead-letter queue.
    """

    def __init__(self, reason: DecodeReason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: DecodeReason = reason


class EventEncodeError(NonRetryableError):
    """A record does not fit its event schema, or the event name is unknown."""

    def __init__(self, event: str, message: str) -> None:
        super().__init__(f"cannot encode {event}: {message}")
        self.event = event


class Event(NamedTuple):
    """A decoded event: its short schema name (``"Heartbeat"``) and its record."""

    name: str
    record: dict[str, Any]


class _Reader(NamedTuple):
    name: str
    read: _BodyReader  # the whole body, resolved to the current schema
    read_envelope: _BodyReader  # the envelope alone (it leads the body)


class EventCodec:
    """Encodes and decodes the events of one schema set; immutable and thread-safe."""

    def __init__(
        self, schemas: SchemaSet, *, timestamps: Literal["datetime", "epoch_ms"] = "datetime"
    ) -> None:
        self.schemas = schemas
        self.timestamps = timestamps
        read_as = _epoch_ms_schema if timestamps == "epoch_ms" else _same
        self._writers: dict[str, tuple[bytes, dict[str, Any]]] = {}
        for schema in schemas.current.values():
            entry = (MAGIC + schema.fingerprint, schema.parsed)
            self._writers[schema.name] = entry
            self._writers[schema.fullname] = entry
        # Keyed by the whole 10-byte header (magic + fingerprint).
        self._readers: dict[bytes, _Reader] = {}
        for fingerprint, writer in schemas.by_fingerprint.items():
            current = schemas.current.get(writer.name)
            if current is None:
                continue  # a retired event: its messages decode as unknown
            reader = None if current.fingerprint == fingerprint else read_as(current.parsed)
            self._readers[MAGIC + fingerprint] = _Reader(
                current.name,
                _body_reader(read_as(writer.parsed), reader),
                _body_reader(read_as(writer.envelope), None),
            )

    def schema(self, event: str) -> EventSchema:
        """The current schema of ``event`` (short or full name).

        Raises:
            EventEncodeError: no such event.
        """
        schema = self.schemas.current.get(event.rsplit(".", 1)[-1])
        if schema is None:
            raise EventEncodeError(event, f"unknown event; known: {sorted(self.schemas.current)}")
        return schema

    @property
    def event_names(self) -> list[str]:
        """Short names of every current event, sorted."""
        return sorted(self.schemas.current)

    def encode(self, event: str | EventSchema, record: dict[str, Any]) -> bytes:
        """Single-object encode ``record`` with the current schema of ``event``.

        Fields with a default may be omitted; a field the schema does not have is an error
        (it is almost always a typo that would otherwise be dropped silently).

        Raises:
            EventEncodeError: unknown event, or the record does not fit the schema.
        """
        name = event if isinstance(event, str) else event.name
        try:
            header, schema = self._writers[name]
        except KeyError:
            raise EventEncodeError(name, f"unknown event; known: {self.event_names}") from None
        buffer = BytesIO()
        buffer.write(header)
        try:
            schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except Exception as err:  # fastavro raises ValueError, TypeError, KeyError, ...
            raise EventEncodeError(name, f"{type(err).__name__}: {err}") from err
        return buffer.getvalue()

    def decode(self, data: bytes) -> Event:
        """Decode a single-object encoded message into ``Event(name, record)``.

        Raises:
            EventDecodeError: too short, bad magic, unknown fingerprint, or a body that is
                truncated, corrupt or followed by trailing bytes.
        """
        if type(data) is not bytes:
            data = bytes(data)  # memoryview/bytearray: slices must be hashable
        # Hot path: one slice and one lookup check magic and fingerprint together.
        reader = self._readers.get(data[:HEADER_SIZE])
        if reader is None:
            raise self._header_error(data)
        buffer = BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            record = reader.read(buffer)
        except Exception as err:  # truncation: EOFError; corruption: many types
            raise EventDecodeError(
                "corrupt_body",
                f"{reader.name} body unreadable ({len(data)} bytes): {type(err).__name__}: {err}",
            ) from err
        if buffer.tell() != len(data):
            raise EventDecodeError(
                "corrupt_body",
                f"{reader.name} body has {len(data) - buffer.tell()} trailing bytes",
            )
        return _new_event(Event, (reader.name, record))

    def decode_envelope(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Read only the event name and envelope of a message (cheap: the envelope leads).

        Raises:
            EventDecodeError: as ``decode`` for the header and the envelope bytes.
        """
        data = bytes(data)
        reader = self._readers.get(data[:HEADER_SIZE])
        if reader is None:
            raise self._header_error(data)
        buffer = BytesIO(data)
        buffer.seek(HEADER_SIZE)
        try:
            envelope = reader.read_envelope(buffer)
        except Exception as err:
            raise EventDecodeError(
                "corrupt_body", f"{reader.name} envelope unreadable: {type(err).__name__}: {err}"
            ) from err
        return reader.name, envelope

    def body_reader(self, event: str) -> tuple[bytes, Callable[[BytesIO], dict[str, Any]]]:
        """The header (magic + fingerprint) of ``event``'s current schema and the function
        that reads a body written with that schema from a buffer at the body's start: for a
        loop decoding one event kind in bulk (``decode`` does the same per message, and
        remains the path for every other header).

        Raises:
            EventEncodeError: no such event.
        """
        schema = self.schema(event)
        header = MAGIC + schema.fingerprint
        return header, self._readers[header].read

    def _header_error(self, data: bytes) -> EventDecodeError:
        """Why ``data`` has no known header (called only once the fast lookup failed)."""
        if len(data) < HEADER_SIZE:
            return EventDecodeError(
                "too_short",
                f"{len(data)} bytes, a single-object encoded message has at least {HEADER_SIZE}",
            )
        if data[:2] != MAGIC:
            return EventDecodeError(
                "bad_magic", f"starts with {data[:2].hex()}, expected {MAGIC.hex()}"
            )
        return EventDecodeError(
            "unknown_fingerprint",
            f"writer schema {data[2:HEADER_SIZE].hex()} is not in {self.schemas.directory} "
            "(a newer producer, or not a lakewarden event)",
        )


def _body_reader(writer: dict[str, Any], reader: dict[str, Any] | None) -> _BodyReader:
    """A function reading one body written with ``writer`` (resolved to ``reader`` when
    given) from a buffer positioned at its start.

    ``schemaless_reader`` redoes on every call what depends on the schemas alone: a fresh
    named-types table filled from the parsed schema, an options dict, the check that the
    schema is parsed; a quarter of the decode time of a timeline event. It is done once here,
    and each call goes straight to the record reader ``schemaless_reader`` ends in (fastavro's
    ``_read_data``, with the same arguments it would pass). Without it (another fastavro
    version) ``schemaless_reader`` is used: the same records, a little slower.
    """
    if _read_data is None:
        return functools.partial(_schemaless_read, writer_schema=writer, reader_schema=reader)
    named: dict[str, dict[str, Any]] = {"writer": {}, "reader": {}}
    parse_schema(writer, named["writer"])  # parsed already: fills the named types only
    if reader is not None:
        parse_schema(reader, named["reader"])
    read = _read_data
    options = dict(_READ_OPTIONS)

    def read_body(buffer: BytesIO) -> dict[str, Any]:
        return read(buffer, writer, named, reader, options)

    return read_body


_BodyReader = Callable[[BytesIO], dict[str, Any]]
# schemaless_reader's defaults, as it hands them to the record reader.
_READ_OPTIONS: Final = {
    "return_record_name": False,
    "return_record_name_override": False,
    "handle_unicode_errors": "strict",
    "return_named_type": False,
    "return_named_type_override": False,
}
# fastavro returns ``Any``-ish unions; typing the functions once keeps ``cast`` off the hot path.
_schemaless_read = cast(Callable[..., dict[str, Any]], schemaless_reader)
# The C record reader: not in fastavro's typed surface (None in a fastavro without it).
_read_data = cast(
    "Callable[..., dict[str, Any]] | None",
    getattr(importlib.import_module("fastavro._read"), "_read_data", None),
)
# NamedTuple's generated __new__ is Python code; tuple.__new__ builds the same object faster.
_new_event = tuple.__new__


def _same(parsed: dict[str, Any]) -> dict[str, Any]:
    return parsed


def _epoch_ms_schema(parsed: dict[str, Any]) -> dict[str, Any]:
    """``parsed`` with its ``timestamp-millis`` annotations dropped: the bytes are the same
    Avro ``long``, decoded as that number rather than converted to a ``datetime``."""

    def plain(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: plain(v)
                for k, v in node.items()
                if not k.startswith("__") and (k, v) != ("logicalType", "timestamp-millis")
            }
        if isinstance(node, list):
            return [plain(v) for v in node]
        return node

    return cast(dict[str, Any], parse_schema(plain(parsed)))


@functools.cache
def epoch_ms_codec() -> EventCodec:
    """``default_codec()``, but ``timestamp-millis`` fields decode as epoch ms (``int``).

    Raises:
        ConfigurationError: the schema directory is missing or invalid.
    """
    return EventCodec(load_schema_set(default_schema_dir()), timestamps="epoch_ms")


@functools.cache
def default_codec() -> EventCodec:
    """The codec for the project's ``schemas/`` directory, loaded once per process.

    Raises:
        ConfigurationError: the schema directory is missing or invalid.
    """
    return EventCodec(load_schema_set(default_schema_dir()))


def encode(event: str | EventSchema, record: dict[str, Any]) -> bytes:
    """``default_codec().encode``: see ``EventCodec.encode``.

    Raises:
        EventEncodeError: unknown event, or the record does not fit the schema.
    """
    return default_codec().encode(event, record)


def decode(data: bytes) -> Event:
    """``default_codec().decode``: see ``EventCodec.decode``.

    Raises:
        EventDecodeError: the message cannot be decoded (``reason`` says why).
    """
    return default_codec().decode(data)
