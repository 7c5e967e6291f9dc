"""When a pending instant's files may be deleted: only on positive knowledge that its executor
is dead (ARCHITECTURE, invariant 10). The one statement of the rule; ``execute_cancel``, an
executor's claim of a plan, the cleaner's expiry of cancellable plans, its rollback of failed
writes and cancel-manager all ask ``judge`` (through ``verdict`` / ``require_dead``).

Evidence, judged in this order:

1. the coordinator says the executor is ALIVE: refused (it is working on the files);
2. a plan's claim mark younger than its tolerance names an executor that no heartbeat verdict
   concerns yet (the monitor has not processed its first beat, or judged an earlier
   executor): refused, as alive;
3. heartbeat-monitor's expiry record: the caller holds a ``HeartbeatExpired`` naming the
   instant, or the coordinator says DEAD about the executor the mark names (with no mark:
   about whoever beat last). In-process, DEAD is the embedded coordinator having seen the
   heartbeat block end. Licensed;
4. no verdict (UNKNOWN, or DEAD about another executor than the one the mark names):
   - a plan nobody holds a claim on (no mark: an executor writes its mark under the table
     lock before its first beat and removes it only when it stops): licensed;
   - with no liveness monitor (the embedded coordinator, which sees no other process's
     heartbeats): a claim mark older than its tolerance: licensed;
   - with a monitor that answered, long after the instant was requested, that it never heard
     of it (an ingestion whose writer died before its first beat, ``never_beat``): licensed;
   - anything else: refused, **never guessed**: the monitor is down, its view cannot be read,
     or it has not judged the executor yet, and the error says which evidence is missing.

Being wrong in the licensing direction would delete the files of a live executor; being wrong
in the refusing direction only makes a cancel or a clean wait for the next try.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.errors import RetryableError
from lakewarden.storage import Storage, StorageError
from lakewarden.table.claim_mark import ClaimMark, read_claim_mark
from lakewarden.table.coordinator import ExecutorLiveness, Liveness

__all__ = [
    "DeathVerdict",
    "Evidence",
    "LivenessUnknownError",
    "judge",
    "unknown_error",
    "verdict",
]


class LivenessUnknownError(RetryableError):
    """Nothing positively says the executor of a pending instant is dead (heartbeat-monitor
    down or behind, its view unreadable, no expired claim): its files are kept. Retry once
    the monitor runs; the message names the missing evidence."""


@dataclass(frozen=True)
class Evidence:
    """What is known about the executor of ``instant`` when deciding."""

    instant: str
    liveness: Liveness
    judged: str | None  # the executor the coordinator's verdict concerns, when it says
    monitored: bool  # a liveness monitor judges other processes' executors
    now_ms: int  # wall clock, epoch ms (claim marks are dated by it)
    plan: bool = False  # a table-service plan: claim marks apply
    mark: ClaimMark | None = None
    expired: bool = False  # the caller holds heartbeat-monitor's HeartbeatExpired for it
    never_beat: bool = False  # the monitor answered it never heard of it, long after request


@dataclass(frozen=True)
class DeathVerdict:
    """``dead``: the files may be deleted; ``reason`` says on what evidence, or why not.
    ``alive`` marks a refusal because an executor is (or may just have started) working;
    ``owner`` names it when known."""

    dead: bool
    reason: str
    alive: bool = False
    owner: str | None = None


def judge(e: Evidence) -> DeathVerdict:
    """The rule (steps in the module docstring); pure."""
    mark = e.mark
    if e.liveness is Liveness.ALIVE:  # 1.
        return DeathVerdict(False, "its heartbeat is alive", alive=True, owner=e.judged)
    unjudged = mark is not None and mark.owner != e.judged
    if mark is not None and unjudged and mark.fresh(e.now_ms):  # 2.
        return DeathVerdict(
            False,
            f"{mark.owner} claimed the plan {mark.age_s(e.now_ms):.1f} s ago and no heartbeat "
            f"verdict on that executor exists yet (a claim counts for "
            f"{mark.tolerance_ms / 1000:.1f} s)",
            alive=True,
            owner=mark.owner,
        )
    if e.expired:  # 3.
        return DeathVerdict(True, "heartbeat-monitor declared its executor dead (expiry record)")
    if e.liveness is Liveness.DEAD and not unjudged:
        who = e.judged or "its executor"
        return DeathVerdict(True, f"{who} is dead (its heartbeat expired or ended)")
    if e.plan and mark is None:  # 4.
        return DeathVerdict(True, "no executor holds a claim on it")
    if not e.monitored and mark is not None:
        return DeathVerdict(
            True,
            f"no liveness monitor runs and {mark.owner}'s claim mark is "
            f"{mark.age_s(e.now_ms):.1f} s old, past its tolerance of "
            f"{mark.tolerance_ms / 1000:.1f} s",
        )
    if e.never_beat:
        return DeathVerdict(True, "heartbeat-monitor never heard of it, long after its request")
    if e.monitored:
        who = mark.owner if mark is not None else "its executor"
        why = (
            f"heartbeat-monitor has no verdict on {who} (the monitor is down, its liveness "
            "view cannot be read, or it has not processed that executor's beats yet)"
        )
    else:
        why = (
            "no liveness monitor runs and this process never saw its executor (it may be "
            "alive in another process)"
        )
    return DeathVerdict(False, why, owner=mark.owner if mark is not None else None)


def verdict(
    coordinator: ExecutorLiveness,
    storage: Storage,
    table_id: str,
    instant: str,
    *,
    now_ms: int,
    plan: bool,
    expired: bool = False,
    never_beat: bool = False,
) -> DeathVerdict:
    """Gather the evidence about ``instant``'s executor and ``judge`` it. A claim mark that
    cannot be read is missing evidence: refused."""
    mark = None
    if plan:
        try:
            mark = read_claim_mark(storage, instant)
        except StorageError as err:
            return DeathVerdict(False, f"its claim mark cannot be read ({err})")
    return judge(
        Evidence(
            instant=instant,
            liveness=coordinator.liveness(table_id, instant),
            judged=coordinator.executor_of(table_id, instant),
            monitored=coordinator.monitors_liveness(),
            now_ms=now_ms,
            plan=plan,
            mark=mark,
            expired=expired,
            never_beat=never_beat,
        )
    )


def unknown_error(
    table_id: str, instant: str, found: DeathVerdict, what: str
) -> LivenessUnknownError:
    """The named error of a refusal that is not "alive": ``what`` says what was not done."""
    return LivenessUnknownError(
        f"{what} of instant {instant} of table {table_id}: nothing says its executor is dead: "
        f"{found.reason}. Its files are kept; only positive knowledge of death licenses "
        "deleting them. Help: make sure heartbeat-monitor runs (lakewarden dev status), then "
        "retry; a claim expires after its tolerance.",
        table=table_id,
        instant=instant,
    )
