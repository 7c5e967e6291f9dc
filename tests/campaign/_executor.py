"""One campaign table-service process: schedules plans, executes them, requests cancellations.

    python tests/campaign/_executor.py SPEC_JSON

``SPEC_JSON`` names the table URI, the process and its incarnation, its seed, whether it
cancels through cancel-manager, the history file and the stop file (like ``_writer.py``).
Every table with table services gets two of these processes, so they race for the same
plans: at most one of them may be told "completed" for a plan (docs/architecture.md invariant 4).

Each round it does one of:

- ``schedule``: a clustering plan (sorted by ``ts``, so any bucket qualifies) or, on a
  merge-on-read table, a compaction plan, cancellable or not, sometimes with a cancellation
  policy the cleaner enforces;
- ``run``: ``Table.run_table_service`` of a pending plan (the oldest, or a random one);
- ``cancel``: a cancel request for a pending cancellable plan, through cancel-manager
  (``CancelClient``) when the stack runs it, else ``Table.request_cancel``.

History lines (fsynced before the step starts, then its outcome), read by
``_service_checkers.py``: ``invoke`` with ``step`` and ``plan``; then ``done`` with ``step``,
``plan`` and ``outcome`` (run: completed, aborted, already_aborted; cancel: the status;
schedule: the new plan or none), ``fail`` with the named error, or ``unknown``
(``CommitStateUnknownError`` or a raw error, flagged ``raw``). An ``invoke`` with no outcome
(the process was killed in it) is unknown.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from _writer import History, arm_faults

ACTOR_PREFIX = "executor-"


def _open_table(spec: dict[str, Any]) -> Any:
    from lakewarden.api.connection import connect
    from lakewarden.api.table import Table
    from lakewarden.settings import Settings
    from lakewarden.storage import open_storage
    from lakewarden.storage.faults import FaultyStorage
    from lakewarden.table.config import load_config

    settings = Settings()
    storage = open_storage(spec["uri"], settings)
    config = load_config(storage)
    # Stalls at destructive steps (embedded mode); none in the Kafka mode's plans.
    faulty = arm_faults(FaultyStorage(storage), spec.get("storage_faults", []))
    actor = f"{ACTOR_PREFIX}{spec['writer']}-{spec['incarnation']}"
    return Table(faulty, config, coordinator=connect(settings).coordinator, actor=actor)


def _pending_plans(table: Any) -> list[Any]:
    return [i for i in table.state().pending() if i.action in ("clustering", "compaction")]


def _schedule(table: Any, rng: random.Random) -> dict[str, Any]:
    cancellable = rng.random() < 0.7
    # A short max-age policy on some plans: the cleaner cancels those nobody executes in time.
    policy = {"max_age_s": 3.0} if cancellable and rng.random() < 0.3 else None
    if table.config.table_type == "mor" and rng.random() < 0.6:
        plan = table.schedule_compaction(
            max_file_groups=2, cancellable=cancellable, cancellation_policy=policy
        )
        kind = "compaction"
    else:
        plan = table.schedule_clustering(
            max_file_groups=2, sort_by=["ts"], cancellable=cancellable, cancellation_policy=policy
        )
        kind = "clustering"
    return {"plan": str(plan) if plan is not None else None, "outcome": kind}


def _run(table: Any, plan: str) -> dict[str, Any]:
    run = table.run_table_service(plan)
    return {"outcome": str(run.outcome), "attempt": run.attempt}


def _cancel(table: Any, plan: str, client: Any) -> dict[str, Any]:
    if client is None:
        outcome = table.request_cancel(plan, requested_by=table.actor, reason="campaign")
        return {"outcome": str(outcome), "ok": True}
    reply = client.request_cancel(
        table.table_id,
        plan,
        table_uri=table.uri,
        requester=table.actor,
        reason="campaign",
        timeout_s=20.0,
    )
    return {"outcome": reply.status, "ok": reply.ok}


def _next_step(rng: random.Random, pending: list[Any]) -> tuple[str, str | None]:
    cancellable = [p for p in pending if p.cancellable]
    draw = rng.random()
    if cancellable and draw < 0.35:
        return "cancel", rng.choice(cancellable).instant
    if pending and draw < 0.8:
        plan = pending[0] if rng.random() < 0.6 else rng.choice(pending)
        return "run", plan.instant
    return "schedule", None


def main(spec: dict[str, Any]) -> None:
    from lakewarden.errors import CommitStateUnknownError, LakewardenError

    history = History(Path(spec["history"]))
    stop = Path(spec["stop"])
    table = _open_table(spec)
    client = None
    if spec.get("cancel_manager"):
        from lakewarden.clients.cancel import CancelClient
        from lakewarden.settings import Settings

        client = CancelClient(Settings(), producer_id=table.actor)
    rng = random.Random(spec["seed"] * 1000 + spec["incarnation"])
    history.append({"phase": "start", "pid": os.getpid(), "actor": table.actor})
    number = 0
    while not stop.exists():
        number += 1
        step, plan = _next_step(rng, _safe_pending(table))
        op_id = f"{spec['writer']}.{spec['incarnation']}.{number}"
        history.append({"phase": "invoke", "op": op_id, "step": step, "plan": plan})
        outcome: dict[str, Any] = {"op": op_id, "step": step, "plan": plan}
        try:
            if step == "schedule":
                outcome.update(phase="done", **_schedule(table, rng))
            elif step == "run":
                outcome.update(phase="done", **_run(table, str(plan)))
            else:
                outcome.update(phase="done", **_cancel(table, str(plan), client))
        except CommitStateUnknownError as err:
            outcome.update(phase="unknown", error=type(err).__name__, message=str(err)[:300])
        except LakewardenError as err:
            outcome.update(phase="fail", error=type(err).__name__, message=str(err)[:300])
        except Exception as err:  # a raw error breaks the contract: the checker reports it
            outcome.update(
                phase="unknown", error=type(err).__name__, raw=True, message=repr(err)[:300]
            )
        history.append(outcome)
        time.sleep(rng.uniform(0.3, 1.0))  # writers must get a chance between plans
    if client is not None:
        client.close()
    history.append({"phase": "stop"})


def _safe_pending(table: Any) -> list[Any]:
    from lakewarden.errors import LakewardenError

    try:
        return _pending_plans(table)
    except LakewardenError:
        return []  # a storage or timeline hiccup: this round schedules


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
