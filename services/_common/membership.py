"""Whether a plain-loop service (timeline-lock, heartbeat-monitor) holds its partitions, and
why not: what its ``/health`` says while it is not OK.

After a broker restart a member's partitions are revoked, or lost when its group session timed
out while the broker was away, and it is not OK until the group reassigns them: seconds
after the broker answers again, longer on a loaded machine. So ``/health`` says why and for
how long, and a probe (the fault campaign's among them) can tell a service waiting for its
partitions from a broken one.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Membership"]


class Membership:
    """Set by the consumer's rebalance callbacks, read by the health probe (plain attributes:
    the probe runs on the health server's thread)."""

    def __init__(self) -> None:
        self.ready = False  # the first assignment completed
        self.rebalancing = True
        self.reason = "waiting for the first partition assignment"
        self._since = time.monotonic()

    def assigned(self) -> None:
        self.rebalancing = False
        self.ready = True

    def revoked(self) -> None:
        self._unready("partitions revoked: the group is rebalancing (a member joined or left)")

    def lost(self) -> None:
        self._unready(
            "partitions lost: the group session timed out (the broker was away or this "
            "process stalled); waiting for the group to reassign them"
        )

    def health(self) -> tuple[bool, dict[str, Any]]:
        """``(healthy, fields)``: ``status`` and, while not OK, ``reason`` and ``not_ok_s``."""
        healthy = self.ready and not self.rebalancing
        if healthy:
            return True, {"status": "ok"}
        return False, {
            "status": "rebalancing" if self.ready else "starting",
            "reason": self.reason,
            "not_ok_s": round(time.monotonic() - self._since, 1),
        }

    def _unready(self, reason: str) -> None:
        if not self.rebalancing:
            self._since = time.monotonic()
        self.rebalancing = True
        self.reason = reason
