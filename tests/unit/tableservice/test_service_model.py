"""The model test of table services: random interleavings of ingestion (upserts, Spark-like
appends), clustering plans (cancellable or not), executors (that may crash mid-rewrite, or
find another process's executor running the same plan), cancel requests and executions, on
one in-memory table seen by three "processes" (each its own coordinator, so heartbeats are
invisible across them, as without Kafka).

Invariants after every step (docs/architecture.md 1-5):

1. every file a snapshot names exists (no executor, rollback or cancel deleted a committed
   file), and table services never change what a read returns;
2. no instant is both completed and aborted or rolled back; the read equals the last read an
   ingestion left (plans only rearrange files);
3. an instant with a cancel request never completes; an aborted plan leaves no file behind;
4. at most one completed per plan (the log), and no plan's output is both committed and
   deleted;
5. an ingestion that completed over a pending cancellable plan leaves that plan
   cancel-requested (or aborted): it can never complete.
"""

from __future__ import annotations

from typing import Any

from _hypothesis_profiles import examples
from _memstore import MemStorage
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule
from service_tables import SCHEMA, HookedClustering, append, as_executor, as_sorted, hook, rows

from lakewarden.api.table import Table
from lakewarden.errors import LakewardenError
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.conflicts import Footprint
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import TABLE_SERVICE_ACTIONS, Transition
from lakewarden.tableservice import RewriteJob, schedule
from lakewarden.testing import SimulatedCrash


class ServiceModel(RuleBasedStateMachine):
    plans = Bundle("plans")

    @initialize()
    def setup(self) -> None:
        storage = MemStorage()
        config = TableConfig.new(
            name="m", record_key="id", schema=SCHEMA, partition_by=["region"], buckets=2
        )
        save_new_config(storage, config)
        base = Table(storage, config, coordinator=EmbeddedCoordinator(), actor="p0")
        self.procs = [base] + [as_executor(base, f"p{n}", EmbeddedCoordinator()) for n in (1, 2)]
        self.expected: list[dict[str, Any]] = []
        self.next_key = 0
        self.ever_cancel_requested: set[str] = set()

    # -- ingestion --------------------------------------------------------------------------

    @rule(proc=st.integers(0, 2), keys=st.lists(st.integers(0, 11), min_size=1, max_size=4))
    def upsert(self, proc: int, keys: list[int]) -> None:
        data = rows(
            *[(k, "eu" if k % 2 else "us", self.next_key, f"u{self.next_key}") for k in keys]
        )
        self.next_key += 1
        try:
            self.procs[proc].write(data)
        except LakewardenError:
            pass  # a named conflict with a non-cancellable plan: rolled back, nothing changed
        self.expected = as_sorted(self.procs[0].read())

    @rule(proc=st.integers(0, 2), tasks=st.integers(1, 3))
    def spark_append(self, proc: int, tasks: int) -> None:
        shares = []
        for _ in range(tasks):
            k = 100 + self.next_key
            self.next_key += 1
            shares.append(rows((k, "eu", 0, "a"), (k + 1000, "us", 0, "a")))
        append(self.procs[proc], *shares)
        self.expected = as_sorted(self.procs[0].read())

    # -- plans ------------------------------------------------------------------------------

    @rule(target=plans, proc=st.integers(0, 2), cancellable=st.booleans())
    def schedule_clustering(self, proc: int, cancellable: bool) -> str:
        instant = schedule(
            self.procs[proc].service_context(), HookedClustering(), cancellable=cancellable
        )
        return str(instant) if instant is not None else ""

    @rule(
        plan=plans,
        proc=st.integers(0, 2),
        then=st.sampled_from(["finish", "crash", "rival", "ingest"]),
        rival=st.integers(0, 2),
    )
    def execute(self, plan: str, proc: int, then: str, rival: int) -> None:
        """An executor runs the plan; mid-rewrite its process dies, another process's executor
        runs the same plan, or an upsert lands on the plan's file groups."""
        if not plan:
            return

        def mid_rewrite(job: RewriteJob) -> None:
            hook(plan, lambda _: None)
            if then == "crash":
                raise SimulatedCrash()
            if then == "rival":
                self._quietly(lambda: self.procs[rival].run_table_service(plan))
            if then == "ingest":
                self.upsert(rival, [1, 2, 3])

        hook(plan, mid_rewrite)
        try:
            self._quietly(lambda: self.procs[proc].run_table_service(plan))
        except SimulatedCrash:
            pass
        finally:
            hook(plan, lambda _: None)

    @rule(plan=plans, proc=st.integers(0, 2), execute=st.booleans())
    def cancel(self, plan: str, proc: int, execute: bool) -> None:
        if not plan:
            return
        self._quietly(lambda: self.procs[proc].request_cancel(plan, reason="model"))
        if execute:
            self._quietly(lambda: self.procs[proc].execute_cancel(plan))

    @staticmethod
    def _quietly(step: Any) -> None:
        try:
            step()
        except LakewardenError:
            pass  # every refusal is a named error; the invariants judge what happened

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def safety(self) -> None:
        if not hasattr(self, "procs"):
            return
        table = self.procs[0]
        state = table.state()
        snapshot = table.snapshot() if state.completed() else None
        if snapshot is not None:  # 1.
            for file_slice in snapshot.slices.values():
                for path in file_slice.paths:
                    assert table.storage.exists(path), f"{path} of the snapshot is gone"
        assert as_sorted(table.read()) == self.expected  # 1., 2.
        for inst in state.instants.values():
            if inst.state is Transition.CANCEL_REQUESTED:
                self.ever_cancel_requested.add(inst.instant)
            if inst.instant in self.ever_cancel_requested:  # 3.
                assert inst.state is not Transition.COMPLETED, inst.instant
            if inst.action in TABLE_SERVICE_ACTIONS and inst.state is Transition.ABORTED:
                leftovers = [
                    o.key
                    for o in table.storage.list("")
                    if o.key.endswith(f"_{inst.instant}.parquet")
                ]
                assert leftovers == [], f"aborted plan {inst.instant} left {leftovers}"
        for plan in state.pending_plans():  # 5.
            if not plan.cancellable or plan.state is Transition.CANCEL_REQUESTED:
                continue
            for done in state.completed_since(plan.requested_seq):
                if done.action in TABLE_SERVICE_ACTIONS:
                    continue
                assert Footprint.of(done).overlap(Footprint.of(plan)) is None, (
                    f"ingestion {done.instant} overtook plan {plan.instant} without cancelling it"
                )


ServiceModel.TestCase.settings = settings(
    max_examples=examples(20),
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_service_model = ServiceModel.TestCase
