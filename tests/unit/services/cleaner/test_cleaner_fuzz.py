"""Fuzzing the cleaner's event handler (issue 17): damaged ``clean.requests``, ``timeline`` and
``heartbeat.expired`` messages (bit flips, truncation, another fingerprint, valid encodings with
absurd values: empty or 1 MB strings, NUL, ``..``, huge or negative numbers) are dead-lettered
or handled, never a ``handler_error`` (the service failing on itself), and the handler keeps
serving: a well-formed clean request right after registers its table and queues it.
"""

from __future__ import annotations

import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cleaner_handler import TABLE, Harness, expired, request, transition

from lakewarden.events import decode
from lakewarden.events.strategies import damaged_messages

pytestmark = pytest.mark.hypothesis

BASES = {
    "CleanRequest": decode(request()).record,
    "TimelineTransition": decode(transition("commit", "completed")).record,
    "HeartbeatExpired": decode(expired("20250314092653589")).record,
}


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(BASES)))
def test_damaged_cleaner_events_never_stop_the_handler(data: st.DataObject, name: str) -> None:
    value = data.draw(damaged_messages(name, BASES[name]))
    key = data.draw(st.sampled_from([TABLE.encode(), b"", b"\x00", None]))
    h = Harness()
    h.feed(value, key=key)
    assert "handler_error" not in h.reasons(), h.dlq.sent
    for _, letter in h.dlq.sent:  # every dead letter names its reason
        assert letter.record["reason"]
    h.dlq.sent.clear()
    h.feed(request("/data/after"), partition=2)
    assert h.dlq.sent == []
    assert h.registry[TABLE] == {"uri": "/data/after", "partition": 2}
    assert h.queue.take() is not None
