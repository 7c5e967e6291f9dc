"""The embedded mode's other campaign processes: a cleaner, a cancel requester and a reader.

    python tests/campaign/_actors.py SPEC_JSON

``SPEC_JSON`` is ``_processes.Workload``'s spec (table URI, name, incarnation, seed, storage
faults, history and stop files) with ``role``: ``cleaner``, ``canceller`` or ``reader``. There
is no Kafka: each process has its own embedded coordinator, so its table lock and its liveness
view end at the process, and only the timeline (claim marks, fences, the state machine) keeps
the processes from undoing each other's work.

- ``cleaner``: ``Table.clean`` over and over with a short policy (keep the latest 1-3 commits,
  no retention window), so cleans delete files while readers read them. History: ``invoke``
  then ``done`` (what the clean did), ``fail`` (a named error) or ``unknown``.
- ``canceller``: for a pending cancellable plan, ``request_cancel`` (step ``cancel``, its
  status) then ``execute_cancel`` (step ``execute_cancel``); both processes pick from the
  same plans, so two requesters race on one plan. The lines are ``_executor.py``'s, so
  ``_service_checkers`` checks them with the executors'.
- ``reader``: reads the latest snapshot (and, some rounds, an older completed instant) over and
  over; each read is recorded: ``read`` with its rows (``key``, ``v``), or ``read_error`` with
  the error's class name and whether it is a ``LakewardenError``. ``_checkers.check_reader``
  says which are allowed.
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

ACTOR_PREFIXES = {"cleaner": "cleaner-", "canceller": "canceller-", "reader": "reader-"}


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
    faulty = arm_faults(FaultyStorage(storage), spec.get("storage_faults", []))
    actor = f"{ACTOR_PREFIXES[spec['role']]}{spec['writer']}-{spec['incarnation']}"
    return Table(faulty, config, coordinator=connect(settings).coordinator, actor=actor)


def _clean(table: Any, rng: random.Random) -> dict[str, Any]:
    from lakewarden.table.clean.policy import CleanPolicy

    policy = CleanPolicy(commits_retained=rng.randint(1, 3), retention_window_s=0.0)
    result = table.clean(policy)
    return {
        "outcome": "cleaned" if result.instant else "nothing",
        "instant": result.instant,
        "files": len(result.files),
        "rolled_back": list(result.rolled_back),
        "cancelled": list(result.cancelled),
        "already_done": list(result.already_done),
    }


def _cancellable(table: Any) -> list[Any]:
    return [
        i
        for i in table.state().pending()
        if i.action in ("clustering", "compaction") and i.cancellable
    ]


def _step(spec: dict[str, Any], table: Any, rng: random.Random, history: History, n: int) -> None:
    from lakewarden.errors import CommitStateUnknownError, LakewardenError

    role = spec["role"]
    steps: list[tuple[str, str | None]] = []
    if role == "cleaner":
        steps = [("clean", None)]
    elif role == "canceller":
        try:
            plans = _cancellable(table)
        except LakewardenError:
            plans = []
        if plans:
            plan = rng.choice(plans).instant
            steps = [("cancel", plan), ("execute_cancel", plan)]
    for number, (step, plan) in enumerate(steps):
        op_id = f"{spec['writer']}.{spec['incarnation']}.{n}.{number}"
        history.append({"phase": "invoke", "op": op_id, "step": step, "plan": plan})
        outcome: dict[str, Any] = {"op": op_id, "step": step, "plan": plan}
        try:
            if step == "clean":
                outcome.update(phase="done", **_clean(table, rng))
            elif step == "cancel":
                status = table.request_cancel(plan, reason="campaign")
                outcome.update(phase="done", outcome=str(status), ok=True)
            else:
                outcome.update(phase="done", outcome=str(table.execute_cancel(plan)))
        except CommitStateUnknownError as err:
            outcome.update(phase="unknown", error=type(err).__name__, message=str(err)[:300])
        except LakewardenError as err:
            outcome.update(phase="fail", error=type(err).__name__, message=str(err)[:300])
        except Exception as err:  # a raw error breaks the contract: the checker reports it
            outcome.update(
                phase="unknown", error=type(err).__name__, raw=True, message=repr(err)[:300]
            )
        history.append(outcome)
        if outcome["phase"] != "done":
            break


def _read(table: Any, rng: random.Random, history: History) -> None:
    from lakewarden.errors import LakewardenError

    as_of = None
    try:
        completed = [i.instant for i in table.state().completed()]
        if completed and rng.random() < 0.3:
            as_of = rng.choice(completed)
        rows = table.read(as_of=as_of, with_meta=True).select(["key", "v"]).to_pylist()
    except Exception as err:
        named = isinstance(err, LakewardenError)
        history.append(
            {
                "phase": "read_error",
                "as_of": as_of,
                "error": type(err).__name__,
                "named": named,
                "message": str(err)[:300] if named else repr(err)[:300],
            }
        )
        return
    history.append({"phase": "read", "as_of": as_of, "rows": rows})


def main(spec: dict[str, Any]) -> None:
    history = History(Path(spec["history"]))
    stop = Path(spec["stop"])
    table = _open_table(spec)
    rng = random.Random(spec["seed"] * 1000 + spec["incarnation"])
    history.append({"phase": "start", "pid": os.getpid(), "actor": table.actor})
    n = 0
    while not stop.exists():
        n += 1
        if spec["role"] == "reader":
            _read(table, rng, history)
            time.sleep(rng.uniform(0.05, 0.3))
        else:
            _step(spec, table, rng, history, n)
            time.sleep(rng.uniform(0.2, 0.8))
    history.append({"phase": "stop"})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
