"""timeline-lock's deferred changelog: one record per changed table per flush, offsets
committed only past acknowledged records, a refused record written again, expiry only of
durable leases, and a crash before a deferred write re-deriving the same grants."""

from __future__ import annotations

import copy
from typing import Any

from test_lock_handler import Harness, req

from lakewarden_services.timeline_lock.deferred import Covered, DeferredChangelog
from lakewarden_services.timeline_lock.handler import ExpiryScanner
from lakewarden_services.timeline_lock.offsets import CommitTracker


class Log:
    """The records ``DeferredChangelog`` writes, and the tables still owned."""

    def __init__(self) -> None:
        self.owned = {"t1", "t2"}
        self.records: list[tuple[str, Covered]] = []

    def write(self, table_id: str, covered: Covered) -> bool:
        if table_id not in self.owned:
            return False
        self.records.append((table_id, list(covered)))
        return True


def _tracked(tracker: CommitTracker, changelog: DeferredChangelog, table: str, offset: int) -> None:
    tracker.processed(0, offset, durable_writes=1)
    changelog.changed(table, 0, offset)


def test_one_record_per_changed_table_per_flush_and_commits_wait_for_it() -> None:
    log, tracker = Log(), CommitTracker()
    changelog = DeferredChangelog(log.write, tracker.delivered)
    for offset, table in enumerate(["t1", "t1", "t2", "t1"]):
        _tracked(tracker, changelog, table, offset)
    assert changelog and tracker.to_commit() == {0: 0}  # nothing written yet
    assert changelog.flush() == 2 and not changelog
    assert log.records == [("t1", [(0, 0), (0, 1), (0, 3)]), ("t2", [(0, 2)])]
    assert not changelog.durable("t1") and changelog.pending() == 2  # in flight
    changelog.on_delivery("t2", [(0, 2)], ok=True)
    assert tracker.to_commit() == {}  # offset 0 (t1's record) is still unacknowledged
    changelog.on_delivery("t1", [(0, 0), (0, 1), (0, 3)], ok=True)
    assert tracker.to_commit() == {0: 4}
    assert changelog.durable("t1") and changelog.durable("t2") and changelog.pending() == 0
    assert changelog.flush() == 0  # nothing changed since


def test_changed_says_when_the_pending_tables_grew() -> None:
    changelog = DeferredChangelog(Log().write, lambda _p, _o: None)
    assert changelog.changed("t1", 0, 0) and changelog.pending() == 1
    assert not changelog.changed("t1", 0, 1)  # already waiting for its record
    changelog.flush()
    assert not changelog.changed("t1", 0, 2)  # in flight: still one pending table
    assert changelog.changed("t2", 0, 3) and changelog.pending() == 2


def test_a_refused_record_is_written_again_and_holds_its_offsets_back_until_then() -> None:
    log, tracker = Log(), CommitTracker()
    changelog = DeferredChangelog(log.write, tracker.delivered)
    _tracked(tracker, changelog, "t1", 0)
    changelog.flush()
    _tracked(tracker, changelog, "t1", 1)  # changed again while the first is in flight
    changelog.on_delivery("t1", [(0, 0)], ok=False)  # the broker refused it
    assert tracker.to_commit() == {0: 0} and not changelog.durable("t1")
    assert changelog.flush() == 1
    assert log.records[-1] == ("t1", [(0, 0), (0, 1)])  # covers the refused one too
    changelog.on_delivery("t1", [(0, 0), (0, 1)], ok=True)
    assert tracker.to_commit() == {0: 2} and changelog.durable("t1")


def test_tables_no_longer_owned_are_not_written_and_forgotten_ones_are_durable() -> None:
    log, tracker = Log(), CommitTracker()
    changelog = DeferredChangelog(log.write, tracker.delivered)
    _tracked(tracker, changelog, "t1", 0)
    _tracked(tracker, changelog, "t2", 1)
    log.owned.discard("t2")  # revoked between the change and the flush
    assert changelog.flush() == 1 and [t for t, _ in log.records] == ["t1"]
    _tracked(tracker, changelog, "t1", 2)
    changelog.forget(["t1"])
    tracker.forget([0])
    assert changelog.flush() == 0 and changelog.pending() == 0
    changelog.on_delivery("t1", [(0, 0)], ok=True)  # a late report after the revocation
    assert tracker.to_commit() == {}


def test_the_scanner_expires_a_lease_only_once_its_deadline_is_durable() -> None:
    h = Harness(now_ms=1_000)
    h.feed(req(ttl_ms=500))
    changelog = DeferredChangelog(Log().write, lambda _p, _o: None)
    changelog.changed("t1", 0, 0)
    sent: list[dict[str, Any]] = []
    flushed: list[int] = []

    def expirable(table_id: str) -> bool:  # what the worker does
        if changelog.durable(table_id):
            return True
        flushed.append(changelog.flush([table_id]))
        return False

    scanner = ExpiryScanner(
        table=h.table,
        send_request=lambda _t, record: sent.append(record),
        owned_since=lambda: 0,
        producer_id="timeline-lock",
        clock=lambda: 2_000,
        expirable=expirable,
    )
    assert scanner.tick() == 0 and flushed == [1]  # due, but its record was not written
    assert scanner.tick() == 0 and flushed == [1, 0]  # written, not acknowledged yet
    changelog.on_delivery("t1", [(0, 0)], ok=True)
    assert scanner.tick() == 1 and sent[0]["lease_expires_ms"] == 1_500


def test_a_crash_before_a_deferred_write_re_derives_the_same_grants() -> None:
    """The requests after the last durable record are applied again, later (another clock),
    by the next owner: the same holders, tokens and queue; only deadlines move later."""
    first = Harness(now_ms=1_000)
    first.feed(req(request_id="a1", owner="a"))
    durable = copy.deepcopy(first.table)  # the changelog had this when the service died
    first.feed(req(request_id="b1", owner="b"))  # queued behind a
    first.feed(req("release", request_id="a2", owner="a", token=1))  # b gets token 2
    first.feed(req(request_id="c1", owner="c"))  # queued behind b
    again = Harness(now_ms=5_000)
    again.table.update(durable)
    again.offset = 0
    for name, request_id, token in [
        ("acquire", "a1", None),  # at or below the applied offset: skipped
        ("acquire", "b1", None),
        ("release", "a2", 1),
        ("acquire", "c1", None),
    ]:
        owner = request_id[0]
        fields: dict[str, Any] = {"request_id": request_id, "owner": owner}
        again.feed(req(name, **fields) if token is None else req(name, token=token, **fields))
    before, after = first.table["t1"], again.table["t1"]
    assert after["holder"]["token"] == before["holder"]["token"] == 2
    assert after["holder"]["owner"] == before["holder"]["owner"] == "b"
    assert [w["owner"] for w in after["queue"]] == [w["owner"] for w in before["queue"]] == ["c"]
    assert after["last_token"] == before["last_token"]
    grants = [(r.request_id, r.status, r.token) for _, r in first.replies[1:]]
    assert [(r.request_id, r.status, r.token) for _, r in again.replies] == grants
