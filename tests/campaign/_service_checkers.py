"""Checkers of table services (clustering, compaction) and cancellation: pure functions from
what the executor processes were told (``_executor.py`` histories) and the raw timeline, the
visible files and the storage keys of a table to a list of violations.

Like ``_checkers.py`` they share no code with what they check (the timeline entries are plain
JSON; only the set of entries the state machine rejected comes from the code under test).
docs/architecture.md invariants 3 and 4, and the RFC-79 rules:

- ``plan_completed_twice``: at most one executor is told "completed" per plan, and the
  timeline holds at most one (non-rejected) ``completed`` entry per plan;
- ``plan_completed_not_on_timeline``: an executor told "completed" finds the plan completed;
- ``plan_outcome_contradicted``: an executor told "aborted" never sees the plan completed;
- ``cancel_undone``: a plan with a (non-rejected) ``cancel_requested`` entry never has a
  ``completed`` one, whichever comes first in the log, nor an executor told it completed;
- ``cancel_request_lost``: a cancel request acknowledged (status other than a refusal) is on
  the timeline (``cancel_requested`` or ``aborted``) and the plan never completes;
- ``aborted_plan_visible``: no file of an aborted plan is in the final snapshot;
- ``aborted_plan_files_left``: no file of an aborted plan is left at a final key once the run
  settled (``execute_cancel`` and the executor's own abort delete them before ``aborted``;
  staging under ``_temporary/`` is left to the cleaner's policy for finished jobs);
- ``service_raw_error``: an executor never gets an error outside ``LakewardenError``.

Whether clustering and compaction kept the rows is ``_checkers.py``'s business: the rows read
back must still equal the writers' history.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from _checkers import TableObservation, Violation

__all__ = ["ServiceOp", "check_services", "service_ops_from_history"]

_PLAN_ACTIONS = ("clustering", "compaction")
# cancel-manager's refusals (CancelReply.ok is False for these) and request_cancel's errors
_REFUSED = {
    "refused_completed",
    "refused_executing",
    "not_cancellable",
    "not_requested",
    "unknown_instant",
    "unknown_table",
    "invalid_request",
    "failed",
}


@dataclass(frozen=True)
class ServiceOp:
    """One step of an executor process as it recorded it; ``phase`` is done, fail or
    unknown, ``outcome`` what a ``done`` step returned."""

    op_id: str
    process: str
    step: str  # schedule, run or cancel
    plan: str | None
    phase: str
    outcome: str | None = None
    error: str | None = None
    raw: bool = False
    message: str = ""


def service_ops_from_history(process: str, lines: list[dict[str, Any]]) -> list[ServiceOp]:
    """The steps of one incarnation; an ``invoke`` without an outcome (killed) is unknown."""
    outcomes = {
        line["op"]: line for line in lines if line.get("phase") in ("done", "fail", "unknown")
    }
    ops = []
    for line in lines:
        if line.get("phase") != "invoke":
            continue
        outcome = outcomes.get(line["op"], {"phase": "unknown", "error": "killed"})
        ops.append(
            ServiceOp(
                op_id=line["op"],
                process=process,
                step=line["step"],
                plan=outcome.get("plan", line.get("plan")),
                phase=outcome["phase"],
                outcome=outcome.get("outcome"),
                error=outcome.get("error"),
                raw=bool(outcome.get("raw", False)),
                message=outcome.get("message", ""),
            )
        )
    return ops


def check_services(ops: list[ServiceOp], obs: TableObservation) -> list[Violation]:
    """Every violation of the table-service invariants on one table."""
    plans = {e["instant"] for e in obs.entries if e["action"] in _PLAN_ACTIONS}
    live = [e for e in obs.entries if e["seq"] not in obs.rejected_seqs]
    by_plan: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for entry in live:
        if entry["instant"] in plans:
            by_plan[entry["instant"]][entry["transition"]].append(entry["seq"])
    return [
        *_check_completions(ops, by_plan),
        *_check_cancels(ops, by_plan),
        *_check_aborted_files(by_plan, obs.visible_files, obs.data_keys),
        *(
            Violation("service_raw_error", f"{op.op_id} ({op.step} {op.plan}) got {op.message}")
            for op in ops
            if op.raw
        ),
    ]


def _told(ops: list[ServiceOp], outcome: str) -> dict[str, list[str]]:
    told: dict[str, list[str]] = defaultdict(list)
    for op in ops:
        if op.step == "run" and op.phase == "done" and op.outcome == outcome and op.plan:
            told[op.plan].append(op.op_id)
    return told


def _check_completions(
    ops: list[ServiceOp], by_plan: dict[str, dict[str, list[int]]]
) -> list[Violation]:
    found = []
    for plan, op_ids in sorted(_told(ops, "completed").items()):
        if len(op_ids) > 1:
            found.append(
                Violation("plan_completed_twice", f"plan {plan}: executors told so: {op_ids}")
            )
        if not by_plan.get(plan, {}).get("completed"):
            found.append(
                Violation(
                    "plan_completed_not_on_timeline",
                    f"plan {plan}: {op_ids[0]} was told completed; its entries: "
                    f"{sorted(by_plan.get(plan, {}))}",
                )
            )
    for plan, seen in sorted(by_plan.items()):
        if len(seen.get("completed", [])) > 1:
            found.append(
                Violation(
                    "plan_completed_twice",
                    f"plan {plan}: completed entries at seqs {seen['completed']}",
                )
            )
    for plan, op_ids in sorted(_told(ops, "aborted").items()):
        if by_plan.get(plan, {}).get("completed"):
            found.append(
                Violation(
                    "plan_outcome_contradicted",
                    f"plan {plan}: {op_ids[0]} was told aborted, the timeline completed it",
                )
            )
    return found


def _check_cancels(
    ops: list[ServiceOp], by_plan: dict[str, dict[str, list[int]]]
) -> list[Violation]:
    found = []
    told_completed = _told(ops, "completed")
    for plan, seen in sorted(by_plan.items()):
        if seen.get("cancel_requested") and (seen.get("completed") or plan in told_completed):
            found.append(
                Violation(
                    "cancel_undone",
                    f"plan {plan}: cancel_requested at seqs {seen['cancel_requested']}, "
                    f"completed at {seen.get('completed', [])}, executors told completed: "
                    f"{told_completed.get(plan, [])}",
                )
            )
    for op in ops:
        if op.step != "cancel" or op.phase != "done" or op.outcome in _REFUSED or not op.plan:
            continue
        seen = by_plan.get(op.plan, {})
        if seen.get("completed") or not (seen.get("cancel_requested") or seen.get("aborted")):
            found.append(
                Violation(
                    "cancel_request_lost",
                    f"{op.op_id} was told {op.outcome} for plan {op.plan}; its entries: "
                    f"{dict(sorted(seen.items()))}",
                )
            )
    return found


def _check_aborted_files(
    by_plan: dict[str, dict[str, list[int]]], visible_files: list[str], data_keys: list[str]
) -> list[Violation]:
    aborted = sorted(plan for plan, seen in by_plan.items() if seen.get("aborted"))
    found = []
    for plan in aborted:
        # a plan's files are named ..._<plan instant>.parquet (tableservice.output)
        shown = [path for path in visible_files if plan in path]
        if shown:
            found.append(Violation("aborted_plan_visible", f"plan {plan}: {shown[:3]}"))
        # Staging under _temporary/ is the cleaner's (finished jobs' work areas, by policy).
        left = Counter(
            key.rsplit("/", 1)[0]
            for key in data_keys
            if f"_{plan}." in key and not key.startswith("_temporary/")
        )
        if left:
            found.append(
                Violation("aborted_plan_files_left", f"plan {plan}: files left in {dict(left)}")
            )
    return found
