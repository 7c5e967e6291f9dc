"""Fuzzing heartbeat-monitor's per-message logic (issue 17): damaged ``heartbeats`` and
``timeline`` messages are dead-lettered or handled, never raised, and the monitor keeps
serving: a well-formed beat right after is tracked.

Damage: bit flips, truncation, a random fingerprint, and valid encodings with absurd values
generated from the schema (any int64 interval, seq or misses, negative included; empty or
100 kB owners; any event time).
"""

from __future__ import annotations

import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_heartbeat_monitor_handler import Harness

from lakewarden.events import default_codec, encode
from lakewarden.events.strategies import event_records

pytestmark = pytest.mark.hypothesis

SCHEMAS = default_codec().schemas.current


@st.composite
def damaged(draw: st.DrawFn, event: str) -> bytes:
    record = draw(event_records(SCHEMAS[event]))
    kind = draw(st.sampled_from(["absurd", "absurd", "flip", "truncate", "fingerprint"]))
    if kind == "absurd" and event == "Heartbeat":
        record["interval_ms"] = draw(st.sampled_from([-1, 0, 2**31 - 1, -(2**31)]))
        record["owner"] = draw(st.sampled_from(["", "x" * 100_000]))
    data = bytearray(encode(event, record))
    if kind == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "fingerprint":
        data[2:10] = draw(st.binary(min_size=8, max_size=8))
    return bytes(data)


@settings(max_examples=examples(50), suppress_health_check=[HealthCheck.too_slow])
@given(
    beat=damaged("Heartbeat"),
    transition=damaged("TimelineTransition"),
    at_ms=st.integers(0, 2**41),
)
def test_damaged_heartbeats_and_transitions_never_stop_the_monitor(
    beat: bytes, transition: bytes, at_ms: int
) -> None:
    h = Harness()
    h.feed(beat, at_ms=at_ms, key=b"t1")
    h.timeline_raw(transition)
    # keeps serving: a good beat of a fresh instant is tracked
    h.beat(at_ms + 1, table_id="t1", instant="20250314092653999")
    assert h.record("20250314092653999") is not None
