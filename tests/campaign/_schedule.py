"""The plan of one campaign run, drawn from its seed alone: tables, writers, faults.

Everything random about a run is decided here, before anything starts, from
``random.Random(seed)``: the same seed gives the same plan (the same tables, writers, storage
faults and fault schedule), so a failing run is reproduced by its seed. What the machine does
with the plan (how fast a writer gets through its operations, which call a SIGSTOP lands in) is
not reproducible; the checkers never depend on it.

Fault kinds (every one is healed before the run ends):

- ``writer_kill``: SIGKILL of a writer process; a new incarnation of it starts ``down_s`` later;
- ``writer_pause``: SIGSTOP of a writer for ``down_s`` (often past its heartbeat tolerance, so
  the cleaner rolls its instant back while it sleeps: the zombie case), then SIGCONT;
- ``service_kill``: SIGKILL of a service's process group, restarted by the dev stack after
  ``down_s``;
- ``service_pause``: SIGSTOP / SIGCONT of a service;
- ``broker_restart``: SIGKILL of the Kafka broker, restarted on the same ports after ``down_s``;
- ``broker_pause``: SIGSTOP / SIGCONT of the broker;
- storage faults (``storage_fail`` / ``storage_lose_reply``): armed inside a writer's
  ``FaultyStorage`` at a call number of one storage operation (counted as planned; whether
  the writer reaches that call depends on the machine);
- Spark task faults (``spark_task_fail`` / ``spark_task_exit`` / ``spark_task_slow``): in the
  n-th write of a Spark writer incarnation, attempt 0 of the write's task 0 raises after its
  task commit, or its Python worker exits (``os._exit``) there, or the task sleeps 3 s first
  (the fault plan, ``lakewarden.faults``); Spark retries the attempt
  (``local[1,2]``: two attempts per task). Counted when the write carrying one starts (the
  writer records it in the write's ``invoke``).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "FAULT_KINDS",
    "FaultEvent",
    "RunPlan",
    "StorageFault",
    "TablePlan",
    "TaskFault",
    "WriterPlan",
    "make_embedded_plan",
    "make_plan",
]

FaultKind = Literal[
    "writer_kill",
    "writer_pause",
    "service_kill",
    "service_pause",
    "broker_restart",
    "broker_pause",
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "writer_kill",
    "writer_pause",
    "service_kill",
    "service_pause",
    "broker_restart",
    "broker_pause",
)
# How often each kind is drawn: writers fail most in real life; a broker restart costs a
# cold-ish start (seconds on a loaded machine), so it is the rarest.
_FAULT_WEIGHTS = (5, 4, 3, 3, 1, 2)
_STORAGE_OPS = ("read", "write", "write_if_absent", "list", "delete", "exists")


@dataclass(frozen=True)
class StorageFault:
    """Call ``nth`` of ``op`` in one writer incarnation fails (``fail``), takes effect and
    then fails (``lose_reply``), or waits ``stall_s`` seconds just before it reaches storage
    (``stall``: ``FaultyStorage.before``; the process holds whatever it checked while the
    others move on)."""

    op: str
    nth: int
    kind: Literal["fail", "lose_reply", "stall"]
    stall_s: float = 0.0


@dataclass(frozen=True)
class TaskFault:
    """Write ``op`` (the n-th of an incarnation) of a Spark writer gets a task fault: its
    task 0's attempt 0 raises after its task commit (``fail``) or its Python worker exits there
    (``exit``); or every attempt of task 0 sleeps 3 s before writing (``slow``)."""

    op: int
    kind: Literal["fail", "exit", "slow"]


@dataclass(frozen=True)
class TablePlan:
    name: str
    table_type: Literal["cow", "mor"]
    buckets: int


@dataclass(frozen=True)
class WriterPlan:
    """One workload process: which table it works on, its seed and its storage faults (the
    same list is armed in every incarnation). ``role``: a Python writer (``_writer.py``), a
    table-service executor (``_executor.py``) or a Spark writer (``_spark_writer.py``)."""

    name: str
    table: str
    seed: int
    storage_faults: tuple[StorageFault, ...]
    role: Literal["writer", "executor", "spark", "cleaner", "canceller", "reader"] = "writer"
    task_faults: tuple[TaskFault, ...] = ()


@dataclass(frozen=True)
class FaultEvent:
    """At ``at_s`` seconds after the workload starts, ``kind`` hits ``target`` for
    ``down_s`` seconds."""

    at_s: float
    kind: FaultKind
    target: str
    down_s: float


@dataclass(frozen=True)
class RunPlan:
    seed: int
    duration_s: float
    on_s3: bool
    tables: tuple[TablePlan, ...]
    writers: tuple[WriterPlan, ...]
    faults: tuple[FaultEvent, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def fault_counts(self) -> dict[str, int]:
        """Faults by kind, storage faults included."""
        counts: dict[str, int] = {}
        for event in self.faults:
            counts[event.kind] = counts.get(event.kind, 0) + 1
        for writer in self.writers:
            for fault in writer.storage_faults:
                kind = f"storage_{fault.kind}"
                counts[kind] = counts.get(kind, 0) + 1
        return counts


def make_plan(
    seed: int,
    *,
    duration_s: float,
    services: tuple[str, ...],
    s3_available: bool,
    s3_share: float = 0.3,
    table_services_share: float = 0.0,
    spark_share: float = 0.0,
) -> RunPlan:
    """The plan of run ``seed``: 1-2 tables, 2-3 writers, storage faults and a fault schedule
    spread over the first 80% of ``duration_s`` (the rest lets the last faults heal).

    With ``table_services_share`` of runs, two table-service executors (``e0``, ``e1``) on the
    first table; with ``spark_share``, a Spark writer (``s0``) on it; each with its own kills
    and pauses. These are drawn from a second generator, so the rest of a seed's plan is the
    same with them or without (the fixed seeds of ``make test`` keep what they were chosen for).
    """
    rng = random.Random(seed)
    on_s3 = s3_available and rng.random() < s3_share
    tables = tuple(
        TablePlan(
            name=f"t{seed}_{index}",
            table_type="mor" if rng.random() < 0.3 else "cow",
            buckets=rng.choice((1, 2, 4)),
        )
        for index in range(rng.randint(1, 2))
    )
    writers = tuple(
        WriterPlan(
            name=f"w{index}",
            table=tables[index % len(tables)].name,
            seed=rng.randrange(2**32),
            storage_faults=_storage_faults(rng),
        )
        for index in range(rng.randint(2, 3))
    )
    faults = _fault_schedule(rng, duration_s, [w.name for w in writers], services)
    extra_rng = random.Random(f"workload-{seed}")
    extra = _extra_processes(extra_rng, tables[0].name, table_services_share, spark_share)
    faults += _process_faults(extra_rng, duration_s, [w.name for w in extra])
    faults = tuple(sorted(faults, key=lambda e: e.at_s))
    return RunPlan(seed, duration_s, on_s3, tables, writers + extra, faults)


def _extra_processes(
    rng: random.Random, table: str, table_services_share: float, spark_share: float
) -> tuple[WriterPlan, ...]:
    extra: list[WriterPlan] = []
    if rng.random() < table_services_share:
        extra += [
            WriterPlan(f"e{n}", table, rng.randrange(2**32), (), role="executor") for n in (0, 1)
        ]
    if rng.random() < spark_share:
        seed = rng.randrange(2**32)
        # Its own generator: the other draws of a seed stay what they were before task faults.
        tasks = _task_faults(random.Random(f"spark-tasks-{seed}"))
        extra.append(WriterPlan("s0", table, seed, (), role="spark", task_faults=tasks))
    return tuple(extra)


def _task_faults(rng: random.Random) -> tuple[TaskFault, ...]:
    """1-3 task faults among writes 2-6 (write 1 is the warm-up, before the clock starts)."""
    ops = sorted(rng.sample(range(2, 7), rng.randint(1, 3)))
    return tuple(TaskFault(op, rng.choice(("fail", "exit", "slow"))) for op in ops)


def _process_faults(
    rng: random.Random, duration_s: float, names: list[str]
) -> tuple[FaultEvent, ...]:
    """0-2 kills or pauses of each extra process, one at a time per process."""
    events = []
    for name in names:
        free_at = 0.5
        for _ in range(rng.randint(0, 2)):
            at_s = round(rng.uniform(free_at, max(free_at, duration_s * 0.8)), 2)
            kind: FaultKind = "writer_kill" if rng.random() < 0.5 else "writer_pause"
            down_s = round(rng.uniform(0.2, 4.0), 2)
            events.append(FaultEvent(at_s, kind, name, down_s))
            free_at = at_s + down_s + 0.5
    return tuple(events)


def _storage_faults(rng: random.Random) -> tuple[StorageFault, ...]:
    return tuple(
        StorageFault(
            op=rng.choice(_STORAGE_OPS),
            nth=rng.randint(1, 120),
            kind=rng.choice(("fail", "lose_reply")),
        )
        for _ in range(rng.randint(0, 3))
    )


def _fault_schedule(
    rng: random.Random, duration_s: float, writers: list[str], services: tuple[str, ...]
) -> tuple[FaultEvent, ...]:
    events = []
    broker_busy_until = -1.0  # one broker fault at a time: a second would hit a dead broker
    busy_until: dict[str, float] = {}
    window = duration_s * 0.8
    for _ in range(rng.randint(2, max(2, int(duration_s / 3)))):
        at_s = round(rng.uniform(0.5, window), 2)
        kind = rng.choices(FAULT_KINDS, weights=_FAULT_WEIGHTS)[0]
        target, down_s = _target(rng, kind, writers, services)
        if busy_until.get(target, -1.0) > at_s or (target == "kafka" and broker_busy_until > at_s):
            continue  # that part is still down or paused: the draw is dropped, not moved
        busy_until[target] = at_s + down_s
        if target == "kafka":
            broker_busy_until = at_s + down_s
        events.append(FaultEvent(at_s, kind, target, down_s))
    return tuple(sorted(events, key=lambda e: e.at_s))


def _target(
    rng: random.Random, kind: FaultKind, writers: list[str], services: tuple[str, ...]
) -> tuple[str, float]:
    if kind.startswith("writer"):
        # Pauses of up to 4 s: past the campaign's heartbeat tolerance (2 s) half the time.
        return rng.choice(writers), round(rng.uniform(0.2, 4.0), 2)
    if kind.startswith("service"):
        return rng.choice(services), round(rng.uniform(0.2, 3.0), 2)
    return "kafka", round(rng.uniform(0.5, 3.0), 2)


# Embedded mode (no Kafka): the processes besides the writers, each two of a kind so they race
# (one reader). Their stalls land at the destructive steps: ``delete`` (between the check that
# licensed it and the delete), ``write_if_absent`` (a timeline append: between a fence and the
# completion it races) and ``read`` (between reading the timeline and acting on it).
EMBEDDED_ACTORS: tuple[tuple[str, str], ...] = (
    ("e0", "executor"),
    ("e1", "executor"),
    ("c0", "cleaner"),
    ("c1", "cleaner"),
    ("x0", "canceller"),
    ("x1", "canceller"),
    ("r0", "reader"),
)
_STALL_OPS = ("delete", "delete", "write_if_absent", "write_if_absent", "read")
# Past the embedded claim tolerance (heartbeat 0.5 s x 4 misses = 2 s) half the time: a stalled
# executor's claim mark expires and a rival may fence it.
_STALL_S = (0.3, 4.0)


def make_embedded_plan(seed: int, *, duration_s: float) -> RunPlan:
    """The plan of embedded run ``seed``: the tables and writers of ``make_plan`` (no S3), and
    on the first table two executors, two cleaners, two cancel requesters and a reader, each
    with 1-3 stalls at destructive steps; kills and pauses of every process (no services)."""
    rng = random.Random(seed)  # drawn as make_plan draws without S3: the same tables, writers
    tables = tuple(
        TablePlan(
            name=f"t{seed}_{index}",
            table_type="mor" if rng.random() < 0.3 else "cow",
            buckets=rng.choice((1, 2, 4)),
        )
        for index in range(rng.randint(1, 2))
    )
    writers = tuple(
        WriterPlan(
            name=f"w{index}",
            table=tables[index % len(tables)].name,
            seed=rng.randrange(2**32),
            storage_faults=_storage_faults(rng),
        )
        for index in range(rng.randint(2, 3))
    )
    actor_rng = random.Random(f"embedded-{seed}")
    actors = tuple(
        WriterPlan(
            name,
            tables[0].name,
            actor_rng.randrange(2**32),
            _stalls(actor_rng) if role != "reader" else (),
            role=role,  # type: ignore[arg-type]
        )
        for name, role in EMBEDDED_ACTORS
    )
    # The reader is never killed: its reads are what is checked.
    targets = [w.name for w in writers] + [a.name for a in actors if a.role != "reader"]
    faults = tuple(sorted(_process_faults(actor_rng, duration_s, targets), key=lambda e: e.at_s))
    return RunPlan(seed, duration_s, False, tables, writers + actors, faults)


def _stalls(rng: random.Random) -> tuple[StorageFault, ...]:
    return tuple(
        StorageFault(
            op=rng.choice(_STALL_OPS),
            nth=rng.randint(1, 40),
            kind="stall",
            stall_s=round(rng.uniform(*_STALL_S), 2),
        )
        for _ in range(rng.randint(1, 3))
    )
