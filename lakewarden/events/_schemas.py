"""Loading the event contract from ``schemas/``: current schemas, their history, fingerprints.

Layout of a schema directory::

    Envelope.avsc                 the shared envelope record ``lakewarden.Envelope``
    <Event>.avsc                  one event; first field ``envelope`` of type lakewarden.Envelope;
                                  a top-level ``"version": N`` attribute (N >= 1)
    history/<Event>.v<N>.<fp>.avsc  every writer schema ever published, self-contained
                                  (envelope inlined), ``fp`` = hex of its 8-byte fingerprint

The fingerprint is CRC-64-AVRO (Rabin) of the Parsing Canonical Form of the *self-contained*
schema (named types inlined), as 8 little-endian bytes: exactly what Avro single-object encoding
puts after ``C3 01``, so any Avro implementation computes the same value from the same schema.
History files are frozen: ``python -m lakewarden.events freeze`` adds the current schemas that
are missing, and a unit test requires every current schema to be frozen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form

from lakewarden.errors import ConfigurationError
from lakewarden.settings import Settings

ENVELOPE_FILE = "Envelope.avsc"
ENVELOPE_FULLNAME = "lakewarden.Envelope"
HISTORY_DIR = "history"
SCHEMA_DIR_ENV = "LAKEWARDEN_SCHEMA_DIR"


@dataclass(frozen=True, slots=True)
class EventSchema:
    """One writer/reader schema of one event, compiled for fastavro.

    ``parsed`` is self-contained (the envelope is inlined) so it can be used with no other
    schema at hand; ``envelope`` is the parsed schema of its ``envelope`` field alone, which
    reads just the prefix of a message body (the envelope is the first field).
    """

    name: str
    fullname: str
    version: int
    fingerprint: bytes
    canonical_form: str
    parsed: dict[str, Any]
    envelope: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SchemaSet:
    """The current schema of every event (by short name) and every known writer schema."""

    directory: Path
    current: dict[str, EventSchema]
    by_fingerprint: dict[bytes, EventSchema]


def default_schema_dir() -> Path:
    """``Settings().schema_dir`` (``$LAKEWARDEN_SCHEMA_DIR``) if set, else the package's own
    ``lakewarden/events/schemas``: in a source tree a link to the repository's ``schemas/``,
    in an installed wheel a copy of it (package data).

    Raises:
        ConfigurationError: the directory does not exist.
    """
    override = Settings().schema_dir
    path = override if override else (Path(__file__).parent / "schemas").resolve()
    if not (path / ENVELOPE_FILE).is_file():
        raise ConfigurationError(
            f"No event schemas at {path} (expected {ENVELOPE_FILE} there). Help: reinstall "
            f"lakewarden (the wheel ships them) or set {SCHEMA_DIR_ENV} to a schemas/ folder."
        )
    return path


def crc64_avro(canonical_form: str) -> bytes:
    """The 8-byte little-endian CRC-64-AVRO fingerprint of a Parsing Canonical Form."""
    # fastavro returns the hex of the little-endian bytes (Avro's own byte order).
    return bytes.fromhex(_fastavro_fingerprint(canonical_form, "CRC-64-AVRO"))


def load_schema_set(directory: Path) -> SchemaSet:
    """Parse every current and historical event schema in ``directory``.

    Raises:
        ConfigurationError: a file is not valid JSON/Avro, breaks the envelope contract, two
            files define one event, or a history file's name disagrees with its content.
    """
    envelope = _read_json(directory / ENVELOPE_FILE)
    named: dict[str, Any] = {}
    _parse(envelope, named, directory / ENVELOPE_FILE)
    current: dict[str, EventSchema] = {}
    by_fingerprint: dict[bytes, EventSchema] = {}
    for path in sorted(directory.glob("*.avsc")):
        if path.name == ENVELOPE_FILE:
            continue
        schema = compile_event(_read_json(path), dict(named), path)
        if schema.name in current:
            raise ConfigurationError(f"Event {schema.name} is defined twice (second: {path}).")
        current[schema.name] = schema
        by_fingerprint[schema.fingerprint] = schema
    for path in sorted((directory / HISTORY_DIR).glob("*.avsc")):
        schema = compile_event(_read_json(path), {}, path)
        expected = history_file_name(schema)
        if path.name != expected:
            raise ConfigurationError(
                f"History schema {path} does not match its name (its content is {expected}). "
                "Help: history files are frozen; restore it from git."
            )
        by_fingerprint.setdefault(schema.fingerprint, schema)
    return SchemaSet(directory=directory, current=current, by_fingerprint=by_fingerprint)


def compile_event(raw: dict[str, Any], named: dict[str, Any], origin: Path) -> EventSchema:
    """Compile one event schema (``named`` holds the envelope unless ``raw`` inlines it).

    Raises:
        ConfigurationError: invalid Avro or the envelope contract is broken.
    """
    parsed = _parse(raw, named, origin, expand=True)
    fields = parsed.get("fields") or []
    first = fields[0] if fields else {}
    envelope_type = first.get("type")
    if (
        parsed.get("type") != "record"
        or first.get("name") != "envelope"
        or not isinstance(envelope_type, dict)
        or envelope_type.get("name") != ENVELOPE_FULLNAME
    ):
        raise ConfigurationError(
            f"{origin}: an event must be a record whose first field is "
            f"`envelope` of type {ENVELOPE_FULLNAME}."
        )
    version = raw.get("version")
    if not isinstance(version, int) or version < 1:
        raise ConfigurationError(f"{origin}: top-level `version` must be an integer >= 1.")
    fullname: str = parsed["name"]
    canonical = to_parsing_canonical_form(parsed)
    return EventSchema(
        name=fullname.rsplit(".", 1)[-1],
        fullname=fullname,
        version=version,
        fingerprint=crc64_avro(canonical),
        canonical_form=canonical,
        parsed=parsed,
        envelope=_parse(envelope_type, {}, origin),
    )


def history_file_name(schema: EventSchema) -> str:
    """``<Event>.v<version>.<fingerprint hex>.avsc``."""
    return f"{schema.name}.v{schema.version}.{schema.fingerprint.hex()}.avsc"


def freeze(schema_set: SchemaSet) -> list[Path]:
    """Write every current schema missing from ``history/``; return the files written."""
    history = schema_set.directory / HISTORY_DIR
    history.mkdir(exist_ok=True)
    written: list[Path] = []
    for schema in schema_set.current.values():
        path = history / history_file_name(schema)
        if path.exists():
            continue
        path.write_text(json.dumps(_plain(schema.parsed), indent=2) + "\n")
        written.append(path)
    return written


def _plain(parsed: Any) -> Any:
    """A parsed fastavro schema without fastavro's private bookkeeping keys."""
    if isinstance(parsed, dict):
        return {k: _plain(v) for k, v in parsed.items() if not k.startswith("__")}
    if isinstance(parsed, list):
        return [_plain(item) for item in parsed]
    return parsed


def _parse(
    raw: Any, named: dict[str, Any], origin: Path, *, expand: bool = False
) -> dict[str, Any]:
    try:
        parsed = cast(dict[str, Any], parse_schema(raw, named, expand=expand))
    except Exception as err:  # fastavro raises several unrelated types for a bad schema
        raise ConfigurationError(f"{origin}: invalid Avro schema: {err}") from err
    return parsed


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigurationError(f"{path}: cannot read schema: {err}") from err
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path}: a schema file must hold one JSON object.")
    return value
