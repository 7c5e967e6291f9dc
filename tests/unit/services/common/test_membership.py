"""``Membership``: what a plain-loop service's ``/health`` says while it does not hold its
partitions (issue 17, reliab 3: after a broker restart it is not OK for some seconds, and now
says why and for how long)."""

from __future__ import annotations

from lakewarden_services._common.membership import Membership


def test_health_says_why_it_is_not_ok_and_since_when() -> None:
    membership = Membership()
    healthy, fields = membership.health()
    assert not healthy and fields["status"] == "starting"
    assert "first partition assignment" in fields["reason"]

    membership.assigned()
    assert membership.health() == (True, {"status": "ok"})

    membership.lost()
    healthy, fields = membership.health()
    assert not healthy and fields["status"] == "rebalancing"
    assert "session timed out" in fields["reason"] and fields["not_ok_s"] >= 0

    membership.revoked()  # still not OK: the reason follows the latest callback
    assert "revoked" in membership.health()[1]["reason"]
    membership.assigned()
    assert membership.health()[0]
