"""Fuzzing timeline-lock's handler (issue 17): every kind of damaged ``lock.requests`` message
is dead-lettered or refused, never raised, and the handler keeps serving: a well-formed
acquire for another table right after it is granted.

Damage: bit flips, truncation, a wrong fingerprint (another event's header), and *valid*
encodings with absurd values (any int64 ttl, negative included; empty or 100 kB ids; any
event time), generated from the schema itself. The real-broker half ("the service keeps
serving, /health stays OK") is ``tests/integration/timeline_lock``'s bad-input test.
"""

from __future__ import annotations

import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lock_handler import Harness, req

from lakewarden.events import default_codec, encode
from lakewarden.events.strategies import event_records

pytestmark = pytest.mark.hypothesis

CODEC = default_codec()
LOCK_REQUEST = CODEC.schemas.current["LockRequest"]


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    record = draw(event_records(LOCK_REQUEST))
    kind = draw(st.sampled_from(["absurd", "absurd", "flip", "truncate", "fingerprint"]))
    if kind == "absurd":
        record["ttl_ms"] = draw(st.sampled_from([-1, 0, 2**63 - 1, -(2**63), 1]))
        record["owner"] = draw(st.sampled_from(["", "x" * 100_000, "w"]))
    data = bytearray(encode("LockRequest", record))
    if kind == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "fingerprint":
        data[2:10] = draw(st.binary(min_size=8, max_size=8))
    return bytes(data)


@settings(max_examples=examples(50), suppress_health_check=[HealthCheck.too_slow])
@given(value=damaged(), key=st.sampled_from([b"t1", b"", b"\x00" * 3, None]))
def test_damaged_lock_requests_never_stop_the_handler(value: bytes, key: bytes | None) -> None:
    h = Harness()
    h.feed_bytes(value, key=key)  # type: ignore[arg-type]
    handled = len(h.dlq) + len(h.replies) + len(h.changed)
    assert handled >= 1  # dead-lettered, refused or answered: never silently dropped
    for letter in h.dlq:  # every dead letter names its reason
        assert letter["reason"]
    # keeps serving: a good request for a fresh table right after is granted
    h.replies.clear()
    h.feed(req(table_id="fresh-table", request_id="after"))
    assert [(t, r.status) for t, r in h.replies if r.request_id == "after"] == [
        ("fresh-table", "granted")
    ]
