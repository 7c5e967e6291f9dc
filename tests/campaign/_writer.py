"""One campaign writer process: random insert / upsert / delete on one table until told to stop.

    python tests/campaign/_writer.py SPEC_JSON

``SPEC_JSON`` names the table URI, the writer and its incarnation, its seed, its storage faults,
the history file and the stop file. Kafka, S3 and heartbeat settings come from the environment
(``LAKEWARDEN_*``), as for any client of the stack.

Before each write it appends an ``invoke`` line to its history (what it is about to write),
fsynced; after it, the outcome it was told: ``ok`` (with the instant), ``fail`` (a named error
that promises nothing was committed) or ``unknown`` (``CommitStateUnknownError``, or an error
that is not a ``LakewardenError`` at all, flagged ``raw``). A write the process was killed in
has an ``invoke`` and no outcome: unknown too. The checkers read only these files and the
final tables.

Keys (so that what each key must hold follows from the history alone):

- an ``insert`` writes fresh keys ``<writer>.i<incarnation>.<op>.<n>`` no other write touches:
  each is visible exactly once when the write was acknowledged, never when it failed, and an
  unknown write is all-or-nothing;
- ``upsert`` and ``delete`` touch the writer's own pool keys ``<writer>.p<n>`` (no other writer
  touches them), with ``ts`` from the wall clock so a later write of a key always wins.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [("key", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.string())]
)
POOL_KEYS = 6


def part_of(key: str) -> str:
    """The partition of a key: two partitions, fixed by the key (a delete must name it)."""
    return f"p{zlib.crc32(key.encode()) % 2}"


class History:
    """The writer's history file: one JSON object per line, fsynced before the write it
    announces starts (a kill leaves the ``invoke`` on disk)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def append(self, line: dict[str, Any]) -> None:
        self._file.write(json.dumps(line, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _rows(keys: list[str], value: str) -> list[dict[str, Any]]:
    return [{"key": k, "part": part_of(k), "ts": time.time_ns(), "v": value} for k in keys]


def _next_write(
    rng: random.Random, writer: str, incarnation: int, op_no: int
) -> tuple[str, list[str]]:
    operation = rng.choices(("insert", "upsert", "delete"), weights=(4, 4, 2))[0]
    if operation == "insert":
        count = rng.randint(1, 5)
        return operation, [f"{writer}.i{incarnation}.{op_no}.{n}" for n in range(count)]
    pool = [f"{writer}.p{n}" for n in range(POOL_KEYS)]
    return operation, sorted(rng.sample(pool, rng.randint(1, 3)))


def _open_table(spec: dict[str, Any]) -> Any:
    from lakewarden.api.connection import connect
    from lakewarden.api.table import Table
    from lakewarden.settings import Settings
    from lakewarden.storage import open_storage
    from lakewarden.storage.faults import FaultyStorage
    from lakewarden.table.config import load_config

    settings = Settings()
    inner = open_storage(spec["uri"], settings)
    config = load_config(inner)  # before the faults: a writer that cannot start tests nothing
    faulty = arm_faults(FaultyStorage(inner), spec["storage_faults"])
    actor = f"campaign-{spec['writer']}-{spec['incarnation']}"
    return Table(faulty, config, coordinator=connect(settings).coordinator, actor=actor)


def arm_faults(faulty: Any, faults: list[dict[str, Any]]) -> Any:
    """Arm the plan's storage faults (``_schedule.StorageFault`` as dicts) in ``faulty``."""
    for fault in faults:
        if fault["kind"] == "stall":
            seconds = float(fault["stall_s"])
            faulty.before(fault["op"], lambda s=seconds: time.sleep(s), nth=fault["nth"])
        elif fault["kind"] == "fail":
            faulty.fail(fault["op"], nth=fault["nth"])
        else:
            faulty.lose_reply(fault["op"], nth=fault["nth"])
    return faulty


# What a workload process does with one write (operation, rows, the Spark task fault to inject
# or None): returns the completed instant, or raises.
WriteFunction = Callable[[str, list[dict[str, Any]], str | None], str]


def write_loop(
    spec: dict[str, Any],
    history: History,
    write: WriteFunction,
    *,
    actor: str,
    bad_row_share: float = 0.0,
    warm_up: bool = False,
) -> None:
    """Draw writes from the seed and make them with ``write`` until the stop file appears,
    recording each (``invoke``, then its outcome) in ``history``.

    With ``bad_row_share``, that share of inserts and upserts also carries one bad row (a
    null record key, ``v`` = ``<op id>.bad``), recorded apart (``bad``): with the error table
    on, it is set aside into the error table when the write commits. With ``warm_up``, write 1
    is a one-row insert, and ``ready`` follows its outcome (the run waits for it before its
    clock starts). The spec's ``task_faults`` name the writes that get one (``task_fault`` in
    their ``invoke``)."""
    from lakewarden.errors import CommitStateUnknownError, LakewardenError

    writer, incarnation = spec["writer"], spec["incarnation"]
    stop = Path(spec["stop"])
    rng = random.Random(spec["seed"] * 1000 + incarnation)
    task_faults = {f["op"]: f["kind"] for f in spec.get("task_faults", ())}
    history.append({"phase": "start", "pid": os.getpid(), "actor": actor})
    op_no = 0
    while not stop.exists():
        op_no += 1
        if warm_up and op_no == 1:
            operation, keys = "insert", [f"{writer}.i{incarnation}.1.0"]
        else:
            operation, keys = _next_write(rng, writer, incarnation, op_no)
        value = f"{writer}.{incarnation}.{op_no}"
        op_id = f"{writer}.{incarnation}.{op_no}"
        rows = _rows(keys, value)
        bad = []
        if bad_row_share and operation != "delete" and rng.random() < bad_row_share:
            bad = [{"key": None, "part": "p0", "ts": time.time_ns(), "v": f"{op_id}.bad"}]
        invoke: dict[str, Any] = {"phase": "invoke", "op": op_id, "operation": operation}
        invoke.update(rows=rows, **({"bad": bad} if bad else {}))
        fault = task_faults.get(op_no)
        history.append({**invoke, "task_fault": fault} if fault else invoke)
        outcome: dict[str, Any] = {"op": op_id}
        try:
            outcome.update(phase="ok", instant=write(operation, rows + bad, fault))
        except CommitStateUnknownError as err:
            outcome.update(phase="unknown", error=type(err).__name__, message=str(err)[:300])
        except LakewardenError as err:
            outcome.update(
                phase="fail",
                error=type(err).__name__,
                instant=getattr(err, "instant", None),
                message=str(err)[:300],
            )
        except Exception as err:  # a raw error breaks the contract: the checker reports it
            outcome.update(
                phase="unknown", error=type(err).__name__, raw=True, message=repr(err)[:300]
            )
        history.append(outcome)
        if warm_up and op_no == 1:
            history.append({"phase": "ready"})


def main(spec: dict[str, Any]) -> None:
    history = History(Path(spec["history"]))
    table = _open_table(spec)

    def write(operation: str, rows: list[dict[str, Any]], task_fault: str | None) -> str:
        result = table.write(pa.Table.from_pylist(rows, schema=SCHEMA), operation)
        return str(result.instant)

    write_loop(spec, history, write, actor=table.actor)
    # How many armed storage faults this incarnation never reached (the rest fired).
    history.append({"phase": "stop", "storage_faults_left": table.storage.pending()})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
