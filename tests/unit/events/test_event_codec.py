"""The single-object codec: fingerprints, header layout, round trips, every malformed input."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakewarden.errors import NonRetryableError
from lakewarden.events import (
    DECODE_REASONS,
    EventDecodeError,
    EventEncodeError,
    decode,
    default_codec,
    encode,
    make_event,
    sample_events,
)
from lakewarden.events._schemas import crc64_avro
from lakewarden.events.codec import HEADER_SIZE, MAGIC
from lakewarden.events.strategies import event_records

CODEC = default_codec()
EVENT_NAMES = CODEC.event_names


def _rabin_fingerprint(data: bytes) -> int:
    """CRC-64-AVRO written straight from the Avro specification, as an independent oracle."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


@pytest.mark.parametrize(
    ("canonical", "expected"),
    # Published vectors (Avro's own fingerprint tests): "int" and "string".
    [('"int"', 0x7275D51A3F395C8F), ('"string"', 0x8F014872634503C7)],
)
def test_crc64_avro_matches_published_vectors(canonical: str, expected: int) -> None:
    assert crc64_avro(canonical) == struct.pack("<Q", expected)
    assert _rabin_fingerprint(canonical.encode()) == expected


def test_single_object_header_for_int_matches_avro() -> None:
    # Avro's single_object_encoding_header test vector for the schema "int".
    header = MAGIC + crc64_avro('"int"')
    assert header == bytes([0xC3, 0x01, 0x8F, 0x5C, 0x39, 0x3F, 0x1A, 0xD5, 0x75, 0x72])


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_event_fingerprint_is_crc64_of_canonical_form(name: str) -> None:
    schema = CODEC.schema(name)
    expected = _rabin_fingerprint(schema.canonical_form.encode())
    assert schema.fingerprint == struct.pack("<Q", expected)
    # The canonical form is self-contained: the envelope is inlined, not a name reference.
    assert '"name":"lakewarden.Envelope","type":"record"' in schema.canonical_form


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_encoded_message_layout(name: str) -> None:
    data = encode(name, sample_events()[name])
    assert data[:2] == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == CODEC.schema(name).fingerprint


@pytest.mark.parametrize("name", EVENT_NAMES)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_every_event(name: str, data: st.DataObject) -> None:
    record = data.draw(event_records(CODEC.schema(name)))
    decoded = decode(encode(name, record))
    assert decoded.name == name
    assert decoded.record == record


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_samples_round_trip_and_event_time_is_utc_datetime(name: str) -> None:
    record = sample_events(table_id="t1")[name]
    decoded_name, decoded = decode(encode(name, record))
    assert decoded_name == name
    event_time = decoded["envelope"]["event_time"]
    assert isinstance(event_time, datetime) and event_time.tzinfo == UTC
    assert (event_time - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) == (
        record["envelope"]["event_time"]
    )
    expected = {**record, "envelope": {**record["envelope"], "event_time": event_time}}
    assert decoded == expected


def test_full_name_and_schema_object_encode_alike() -> None:
    record = sample_events()["Heartbeat"]
    by_short = encode("Heartbeat", record)
    assert encode("lakewarden.Heartbeat", record) == by_short
    assert encode(CODEC.schema("Heartbeat"), record) == by_short


def test_decode_envelope_reads_only_the_envelope() -> None:
    record = sample_events(table_id="orders")["TaskManifest"]
    name, envelope = CODEC.decode_envelope(encode("TaskManifest", record))
    assert name == "TaskManifest"
    assert envelope["table_id"] == "orders"
    assert envelope["event_id"] == record["envelope"]["event_id"]
    assert envelope["schema_version"] == CODEC.schema("TaskManifest").version


def test_omitted_defaults_are_filled() -> None:
    record = make_event(
        "CancelRequest",
        table_id="t",
        producer_id="p",
        request_id="r",
        instant="20250101000000000",
        kind="execute",
        requester="cli",
    )
    assert decode(encode("CancelRequest", record)).record["reason"] is None


# -- encode errors ---------------------------------------------------------------------------


def _heartbeat(**changes: Any) -> dict[str, Any]:
    return {**sample_events()["Heartbeat"], **changes}


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        (_heartbeat(seq="seven"), "seq"),
        (_heartbeat(sequence=7), "sequence"),  # a typo must not be dropped silently
        ({k: v for k, v in _heartbeat().items() if k != "owner"}, "owner"),
    ],
)
def test_encode_rejects_records_that_do_not_fit(record: dict[str, Any], fragment: str) -> None:
    with pytest.raises(EventEncodeError, match="cannot encode Heartbeat") as info:
        encode("Heartbeat", record)
    assert fragment in str(info.value)
    assert isinstance(info.value, NonRetryableError)


def test_encode_rejects_unknown_event() -> None:
    with pytest.raises(EventEncodeError, match="cannot encode Nope: unknown event") as info:
        encode("Nope", {})
    assert info.value.event == "Nope"


def test_encode_rejects_bad_enum_symbol() -> None:
    record = {**sample_events()["LockRequest"], "kind": "steal"}
    with pytest.raises(EventEncodeError, match="cannot encode LockRequest"):
        encode("LockRequest", record)


# -- malformed messages -----------------------------------------------------------------------

GOOD = encode("Heartbeat", sample_events()["Heartbeat"])


@pytest.mark.parametrize(
    ("data", "reason", "fragment"),
    [
        (b"", "too_short", "0 bytes"),
        (GOOD[:9], "too_short", "9 bytes"),
        (b"\xc3\x02" + GOOD[2:], "bad_magic", "starts with c302"),
        (b'{"json": true}', "bad_magic", "starts with 7b22"),
        (MAGIC + b"\x00" * 8 + GOOD[HEADER_SIZE:], "unknown_fingerprint", "0000000000000000"),
        (GOOD[:HEADER_SIZE], "corrupt_body", "body unreadable"),
        (GOOD[:-1], "corrupt_body", "body unreadable"),
        (GOOD[: len(GOOD) // 2], "corrupt_body", "body unreadable"),
        (GOOD + b"\x00", "corrupt_body", "1 trailing bytes"),
        # A string length of -1 (zigzag 0x01) right after the header.
        (GOOD[:HEADER_SIZE] + b"\x01" + GOOD[HEADER_SIZE + 1 :], "corrupt_body", "unreadable"),
    ],
    ids=[
        "empty",
        "header-cut",
        "wrong-magic",
        "json",
        "unknown-fingerprint",
        "no-body",
        "last-byte-cut",
        "half-body",
        "trailing-byte",
        "negative-length",
    ],
)
def test_malformed_messages_raise_one_named_error(data: bytes, reason: str, fragment: str) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode(data)
    assert info.value.reason == reason
    assert reason in DECODE_REASONS
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{reason}: ")
    assert isinstance(info.value, NonRetryableError)


def test_decode_envelope_rejects_malformed_header() -> None:
    with pytest.raises(EventDecodeError) as info:
        CODEC.decode_envelope(b"\x00\x01" + GOOD[2:])
    assert info.value.reason == "bad_magic"


@settings(max_examples=examples(400), deadline=None)
@given(
    name=st.sampled_from(EVENT_NAMES),
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(1, 255)), max_size=4),
)
def test_corrupted_messages_decode_or_raise_only_event_decode_error(
    name: str, cut: int, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(encode(name, sample_events()[name]))
    for position, mask in flips:
        data[position % len(data)] ^= mask
    data = data[: len(data) - cut % (len(data) + 1)]
    try:
        decode(bytes(data))
    except EventDecodeError as err:
        assert err.reason in DECODE_REASONS
