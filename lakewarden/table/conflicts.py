"""Named write-conflict rules, checked when an instant completes.

Each rule looks at the log between the completing instant's ``requested`` entry and the tail
and either finds nothing or a ``ConflictFinding`` that names both instants and the file group.
The same rules run in two places, which is what makes them safe without trusting lock timing:

- the writer (``WriteTransaction.complete``) runs them against the state it appends on and
  raises the finding's named error (a subclass of ``WriteConflictError``);
- the state machine runs them for every ``completed`` entry, so a completion that skipped or
  raced its check (a zombie writer past its lease) is ignored by every reader.

Rules, in the order they are checked:

1. ``OverlappingCommitConflict``: another instant completed after ours was requested and
   touches a file group ours touches (workload, write statistics, replaced file groups, plan);
   a workload with ``replaces_all`` touches every file group. "Ordered" instants (the other
   completed before ours was requested) never conflict: ours saw its result.
2. ``PendingPlanConflict``: for ingestion only, a pending *non-cancellable* compaction or
   clustering plan covers one of our file groups; plans are executed to completion (RFC-79)
   and ingestion must not change their inputs. Plans themselves are not blocked by other
   pending plans (two overlapping plans would otherwise wait for each other forever); the
   first to complete wins by rule 1.

3. ``IngestionPrecedenceConflict``: for a *cancellable* compaction or clustering plan only,
   an ingestion that went inflight (RFC-79 step 2: its workload names the file groups it
   targets), or a pending non-cancellable plan, targets one of the plan's file groups: the
   plan must not complete, pending or not the other one (RFC-79: the plan "should abort if it
   detects that any ingestion write or table service plan (without cancellable config flag)
   is targeting the same file groups").

Cancellable plans never block ingestion (RFC-79 goal A: ingestion takes precedence), and the
ingestion wins unless the plan completed before the ingestion went inflight: rule 3 keeps the
plan from completing once the ingestion is inflight, and an ingestion that goes inflight
after the plan completed meets it by rule 1 then, at its step 2 (``WriteTransaction.inflight``
runs the rules for the workload it declares), before it writes anything. After an ingestion
completes, ``cancellable_plans_in_the_way`` names the plans it overtook (the writer requests
their cancellation, so they abort without executing).

``clean`` and ``rollback`` instants write no data: they neither conflict nor are conflicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lakewarden.errors import NonRetryableError
from lakewarden.table.instant import (
    INGESTION_ACTIONS,
    NO_WORKLOAD_ACTIONS,
    TABLE_SERVICE_ACTIONS,
    Transition,
)
from lakewarden.table.stats import CommitStats, FileGroupId
from lakewarden.table.timeline_state import InstantState, StateView

EVERY_FILE_GROUP = "*"


class WriteConflictError(NonRetryableError):
    """An instant cannot complete because a concurrent instant got there first.

    Attributes: ``table``, ``instant`` (ours), ``other_instant``, ``file_group`` (``"*"`` when
    an overwrite touches every file group).
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None,
        instant: str,
        other_instant: str,
        file_group: str,
    ) -> None:
        super().__init__(message, table=table, instant=instant)
        self.other_instant = other_instant
        self.file_group = file_group


class OverlappingCommitConflict(WriteConflictError):
    """Another instant touching one of our file groups completed after ours was requested."""


class PendingPlanConflict(WriteConflictError):
    """A pending non-cancellable compaction/clustering plan covers one of our file groups."""


class IngestionPrecedenceConflict(WriteConflictError):
    """An inflight ingestion (or a pending non-cancellable plan) targets a file group of the
    cancellable plan completing: the plan aborts (RFC-79 goal A)."""


@dataclass(frozen=True, slots=True)
class ConflictFinding:
    """What a rule found; ``error`` makes the named exception, ``describe`` the reason text
    the state machine records when it rejects the completion."""

    rule: type[WriteConflictError]
    instant: str
    other_instant: str
    file_group: str
    detail: str

    def describe(self) -> str:
        return f"{self.rule.__name__}: {self.detail}"

    def error(self, table: str | None) -> WriteConflictError:
        where = f"Table {table}: " if table else ""
        return self.rule(
            where + self.detail,
            table=table,
            instant=self.instant,
            other_instant=self.other_instant,
            file_group=self.file_group,
        )


@dataclass(frozen=True, slots=True)
class Footprint:
    """The file groups an instant touches."""

    everything: bool
    groups: frozenset[FileGroupId]

    @classmethod
    def of(cls, inst: InstantState, stats: CommitStats | None = None) -> Footprint:
        """Plan, workload and write statistics of ``inst`` (``stats`` when it is completing)."""
        groups: set[FileGroupId] = set(inst.plan_file_groups)
        everything = False
        if inst.workload is not None:
            groups.update(inst.workload.file_groups)
            everything = inst.workload.replaces_all
        for commit in (inst.commit, stats):
            if commit is not None:
                groups.update(w.file_group for w in commit.write_stats)
                groups.update(commit.replaced_file_groups)
        return cls(everything, frozenset(groups))

    def overlap(self, other: Footprint) -> str | None:
        """A file group both touch (the smallest by name, so findings are deterministic),
        ``"*"`` when one touches everything and the other anything, else None."""
        if (self.everything and (other.everything or other.groups)) or (
            other.everything and self.groups
        ):
            return EVERY_FILE_GROUP
        common = self.groups & other.groups
        return min((str(g) for g in common), default=None)


Rule = Callable[[StateView, InstantState, CommitStats | None], ConflictFinding | None]


def overlapping_commit(
    view: StateView, candidate: InstantState, stats: CommitStats | None
) -> ConflictFinding | None:
    """Rule 1: an instant completed after ``candidate`` was requested touches its file groups."""
    if candidate.action in NO_WORKLOAD_ACTIONS:
        return None
    mine: Footprint | None = None  # built on first need: most completions race with nothing
    for other in view.completed_since(candidate.requested_seq):
        if other.instant == candidate.instant or other.action in NO_WORKLOAD_ACTIONS:
            continue
        mine = mine or Footprint.of(candidate, stats)
        file_group = mine.overlap(Footprint.of(other))
        if file_group is None:
            continue
        return ConflictFinding(
            OverlappingCommitConflict,
            candidate.instant,
            other.instant,
            file_group,
            f"instant {candidate.instant} ({candidate.action}, {candidate.operation}) cannot "
            f"complete: instant {other.instant} ({other.action}, {other.operation}) completed "
            f"at seq {other.completed_seq}, after {candidate.instant} was requested at seq "
            f"{candidate.requested_seq}, and both touch file group {file_group}. Help: roll "
            f"back {candidate.instant} (delete its files, then append rolled_back) and rerun "
            "the write against the new snapshot.",
        )
    return None


def pending_plan(
    view: StateView, candidate: InstantState, stats: CommitStats | None
) -> ConflictFinding | None:
    """Rule 2: a pending non-cancellable plan covers a file group of an ingestion."""
    if candidate.action not in INGESTION_ACTIONS:
        return None
    mine: Footprint | None = None  # built on first need: usually no plan is pending
    for plan in view.pending_plans():
        if plan.cancellable or plan.state is Transition.CANCEL_REQUESTED:
            continue  # ingestion takes precedence over cancellable plans (RFC-79 goal A)
        mine = mine or Footprint.of(candidate, stats)
        file_group = mine.overlap(Footprint.of(plan))
        if file_group is None:
            continue
        return ConflictFinding(
            PendingPlanConflict,
            candidate.instant,
            plan.instant,
            file_group,
            f"instant {candidate.instant} ({candidate.action}, {candidate.operation}) cannot "
            f"complete: the pending non-cancellable {plan.action} plan {plan.instant} "
            f"rewrites file group {file_group}. Help: roll back {candidate.instant} and retry "
            f"after {plan.instant} completes, or schedule {plan.action} plans with "
            "cancellable=true so ingestion takes precedence.",
        )
    return None


def ingestion_precedence(
    view: StateView, candidate: InstantState, stats: CommitStats | None
) -> ConflictFinding | None:
    """Rule 3: an inflight ingestion or a pending non-cancellable plan targets a file group of
    the cancellable plan ``candidate``."""
    if candidate.action not in TABLE_SERVICE_ACTIONS or not candidate.cancellable:
        return None
    mine: Footprint | None = None  # built on first need: usually nothing else is pending
    for other in (*view.inflight_ingestions(), *view.pending_plans()):
        if other.instant == candidate.instant or other.rollback_by is not None:
            continue  # an ingestion with a rollback intent can never complete
        if other.action in TABLE_SERVICE_ACTIONS and (
            other.cancellable or other.state is Transition.CANCEL_REQUESTED
        ):
            continue  # of two cancellable plans the first to complete wins (rule 1)
        mine = mine or Footprint.of(candidate, stats)
        file_group = mine.overlap(Footprint.of(other))
        if file_group is None:
            continue
        what = "ingestion" if other.action in INGESTION_ACTIONS else "non-cancellable plan"
        return ConflictFinding(
            IngestionPrecedenceConflict,
            candidate.instant,
            other.instant,
            file_group,
            f"cancellable {candidate.action} plan {candidate.instant} cannot complete: the "
            f"pending {what} {other.instant} ({other.action}, {other.operation}, "
            f"{other.state}) targets file group {file_group}, and takes precedence (RFC-79). "
            f"Help: nothing to do: the plan aborts; schedule it again once {other.instant} "
            "is finished.",
        )
    return None


RULES: tuple[Rule, ...] = (overlapping_commit, pending_plan, ingestion_precedence)


def find_conflict(
    view: StateView, candidate: InstantState, stats: CommitStats | None
) -> ConflictFinding | None:
    """The first finding of ``RULES`` for ``candidate`` completing with ``stats``."""
    for rule in RULES:
        finding = rule(view, candidate, stats)
        if finding is not None:
            return finding
    return None


def check_completion(
    view: StateView, candidate: InstantState, stats: CommitStats | None, *, table: str | None
) -> None:
    """Raise the named conflict for ``candidate`` completing with ``stats``, if any.

    Raises: OverlappingCommitConflict, PendingPlanConflict, IngestionPrecedenceConflict.
    """
    finding = find_conflict(view, candidate, stats)
    if finding is not None:
        raise finding.error(table)


def cancellable_plans_in_the_way(
    view: StateView, candidate: InstantState, stats: CommitStats | None = None
) -> list[InstantState]:
    """Pending cancellable plans overlapping ``candidate`` (the hook for RFC-79 precedence:
    the ingestion writer requests their cancellation before or after it completes)."""
    mine = Footprint.of(candidate, stats)
    return [
        plan
        for plan in view.pending_plans()
        if plan.cancellable
        and plan.state is not Transition.CANCEL_REQUESTED
        and plan.instant != candidate.instant
        and mine.overlap(Footprint.of(plan)) is not None
    ]


def touched(instants: Iterable[InstantState]) -> dict[str, Footprint]:
    """Footprints by instant (for reports and the model test's overlap invariant)."""
    return {i.instant: Footprint.of(i) for i in instants}
