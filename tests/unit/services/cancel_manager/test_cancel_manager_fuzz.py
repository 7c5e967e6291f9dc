"""Fuzzing cancel-manager's handlers (issue 17): damaged ``cancel.requests`` and
``heartbeat.expired`` messages (bit flips, truncation, another fingerprint, valid encodings with
absurd values: empty or 1 MB strings, NUL, ``..``, huge or negative numbers) are dead-lettered
or answered with a refusal, never a ``handler_error`` (the service failing on itself), and the
handler keeps serving: a well-formed request right after gets its clear result.

The damage starts from a real request for a real cancellable plan, so flips land in real
fields (and an undamaged-enough one may really cancel it: also fine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cancel_manager_handler import COORDINATOR, SCHEMA, Harness, fragmented

from lakewarden.api.table import Table
from lakewarden.events import make_event
from lakewarden.events.strategies import damaged_messages

pytestmark = pytest.mark.hypothesis


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, str]:
    """A table with a pending cancellable clustering plan."""
    table = Table.create(
        str(Path(tmp_path_factory.mktemp("cm-fuzz")) / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
        coordinator=COORDINATOR,
    )
    fragmented(table)
    return table, str(table.schedule_clustering(cancellable=True))


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), expiry=st.booleans())
def test_damaged_cancel_events_never_stop_the_handler(
    data: st.DataObject, expiry: bool, planned: tuple[Table, str]
) -> None:
    table, instant = planned
    if expiry:
        name = "HeartbeatExpired"
        base = make_event(
            name,
            table_id=table.table_id,
            producer_id="hm",
            instant=instant,
            owner="x",
            last_seen_ms=0,
            detected_ms=0,
        )
    else:
        name = "CancelRequest"
        base = make_event(
            name,
            table_id=table.table_id,
            producer_id="fuzz",
            request_id="r",
            instant=instant,
            kind="request",
            requester="ops",
            reason="fuzz",
            table_uri=table.uri,
        )
    key = data.draw(st.sampled_from([table.table_id.encode(), b"", None]))
    h = Harness()
    h.feed(data.draw(damaged_messages(name, base)), key=key, expiry=expiry)
    reasons = [event.record["reason"] for _, event in h.dlq.sent]
    assert "handler_error" not in reasons, h.dlq.sent
    assert all(reasons)
    h.dlq.sent.clear()
    assert h.ask(table, "20990101000000000", "request").record["status"] == "unknown_instant"
    assert h.dlq.sent == []
