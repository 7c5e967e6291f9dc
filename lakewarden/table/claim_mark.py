"""A plan's claim mark: ``.lakewarden/claims/<instant>.json``, written by the executor that
claims the plan (under the table lock, before its first beat) and removed when it stops.

It names the executor, when it claimed (wall clock, epoch ms) and its heartbeat tolerance.
``lakewarden.tableservice.claim`` writes and honours it (at most one executor per plan);
``lakewarden.table.death`` reads it as evidence about a plan's executor where no liveness
monitor can judge another process. Defined in the table layer because the cleaner, which
judges liveness too, must not import the table services.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass

from lakewarden.storage import NotFoundError, Storage

__all__ = ["CLAIMS_PREFIX", "ClaimMark", "claim_key", "read_claim_mark"]

log = logging.getLogger(__name__)

CLAIMS_PREFIX = ".lakewarden/claims/"


def claim_key(instant: str) -> str:
    return f"{CLAIMS_PREFIX}{instant}.json"


@dataclass(frozen=True)
class ClaimMark:
    """Who claimed a plan, when (wall clock, epoch ms) and for how long the claim counts
    without a heartbeat verdict (the claimer's heartbeat tolerance)."""

    owner: str
    claimed_ms: int
    tolerance_ms: int

    def fresh(self, now_ms: int) -> bool:
        return now_ms - self.claimed_ms < self.tolerance_ms

    def age_s(self, now_ms: int) -> float:
        return (now_ms - self.claimed_ms) / 1000

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


def read_claim_mark(storage: Storage, instant: str) -> ClaimMark | None:
    """The plan's claim mark; None when there is none or it cannot be parsed (a torn or
    foreign file is not a claim).

    Raises: StorageError (other than a missing mark)."""
    try:
        raw = storage.read(claim_key(instant))
    except NotFoundError:
        return None
    try:
        fields = json.loads(raw)
        return ClaimMark(
            str(fields["owner"]), int(fields["claimed_ms"]), int(fields["tolerance_ms"])
        )
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable claim mark of plan %s", instant)
        return None
