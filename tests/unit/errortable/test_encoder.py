"""``ErrorRecordEncoder`` writes exactly the bytes ``EventCodec.encode`` writes."""

from __future__ import annotations

import uuid

import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.errortable.encoder import ErrorRecordEncoder, new_uuids
from lakewarden.events.codec import default_codec

SHARED = {"commitTime": "20261124000000000", "tableName": "orders", "tableId": "t-1"}
text = st.text(max_size=300)


def _event(
    event_id: str, uid: str, ts_ms: int, schema: str | None, record: str | None,
    message: str | None, context: dict[str, str],
) -> dict[str, object]:  # fmt: skip
    return {
        "envelope": {
            "event_id": event_id,
            "event_time": ts_ms,
            "table_id": "t-1",
            "producer_id": "spark-task:attempt_x_000000_0",
            "schema_version": default_codec().schema("ErrorRecord").version,
        },
        "uid": uid,
        "ts": str(ts_ms),
        "schema": schema,
        "record": record,
        "message": message,
        "context": {**SHARED, **context},
    }


@settings(max_examples=examples(40), deadline=None)
@given(
    ts_ms=st.integers(min_value=0, max_value=2**62),
    schema=st.none() | text,
    record=st.none() | text,
    message=st.none() | text,
    context=st.dictionaries(text.filter(lambda k: k not in SHARED), text, max_size=5),
)
def test_bytes_are_the_codecs(
    ts_ms: int,
    schema: str | None,
    record: str | None,
    message: str | None,
    context: dict[str, str],
) -> None:
    encoder = ErrorRecordEncoder(
        table_id="t-1",
        producer_id="spark-task:attempt_x_000000_0",
        schema=schema,
        shared_context=SHARED,
    )
    event_id, uid = new_uuids(2)
    value = encoder.encode(
        event_id=event_id, uid=uid, ts_ms=ts_ms, record=record, message=message, context=context
    )
    expected = _event(event_id, uid, ts_ms, schema, record, message, context)
    assert value == default_codec().encode("ErrorRecord", expected)
    assert encoder.key == b"t-1"


def test_a_context_key_given_twice_is_refused() -> None:
    encoder = ErrorRecordEncoder(
        table_id="t-1", producer_id="p", schema=None, shared_context=SHARED
    )
    with pytest.raises(ValueError, match="repeat shared context keys"):
        encoder.encode(
            event_id="e", uid="u", ts_ms=1, record=None, message=None, context={"tableId": "x"}
        )


def test_new_uuids_are_distinct_version_4_uuids() -> None:
    ids = new_uuids(500)
    assert len(set(ids)) == 500
    for text_form in ids:
        parsed = uuid.UUID(text_form)
        assert str(parsed) == text_form
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
